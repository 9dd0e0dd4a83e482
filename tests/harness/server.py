"""Tests use the same in-thread uvicorn server as the demo."""

from __future__ import annotations

from devtools.demo.servers import ServerThread, free_port

__all__ = ["ServerThread", "free_port"]
