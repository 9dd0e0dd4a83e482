"""Structured JSON logs (structlog), with secrets kept out.

Idempotency keys are merchant-chosen strings that may carry meaning (order numbers,
customer ids); API keys are credentials.  Neither is ever logged raw: API keys not at all,
idempotency keys only as an HMAC under ``SECRET_KEY`` (``key_digest``), which lets an
operator correlate log lines for one key without being able to read it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import sys
from typing import Any

import structlog

from orchestrator.settings import Settings

_configured = False


def key_digest(secret_key: str, idempotency_key: str) -> str:
    """A stable, non-reversible tag for an idempotency key in logs."""
    mac = hmac.new(secret_key.encode(), idempotency_key.encode(), hashlib.sha256)
    return mac.hexdigest()[:24]


def configure_logging(settings: Settings, *, force: bool = False) -> None:
    global _configured
    if _configured and not force:
        return
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if settings.log_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
