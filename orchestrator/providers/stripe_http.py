"""Stripe's HTTP seam, on urllib3: the client the SDK sends through, and the connection
pools behind it (``http_pools``: one per thread, one SSL context, the environment's proxy).

Only a transport failure (urllib3's or the socket's error) is raised as
``stripe.APIConnectionError``; anything else raised while sending (a cassette miss, a bug)
surfaces as itself (``stripe_errors`` explains why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import stripe
import urllib3

from orchestrator.providers.http_pools import ThreadPools, Transport

__all__ = ["Transport", "Urllib3Client"]


class Urllib3Client(stripe.HTTPClient):
    """The SDK's HTTP seam, on urllib3 connection pools we configure (timeouts, TLS, proxy).

    Why urllib3 and not httpx (which the rest of payorch uses): the provider call is the
    worker's hot path, twice per payment, and urllib3 spends about half the CPU per request
    of httpx (the benchmark, ``payorch bench`` and docs/performance.md, measures this).
    urllib3 is what the SDK's own ``RequestsClient`` sends through, minus the layer of
    ``requests``.
    """

    name = "urllib3"

    def __init__(
        self, *, connect_timeout: float, read_timeout: float, transport: Transport | None
    ) -> None:
        super().__init__()
        self._pools: ThreadPools | None = None
        if transport is None:
            self._pools = ThreadPools(urllib3.Timeout(connect=connect_timeout, read=read_timeout))
            transport = self._pools
        self._transport = transport

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        *,
        _usage: list[str] | None = None,
    ) -> tuple[str, int, Mapping[str, str]]:
        body = post_data.encode() if isinstance(post_data, str) else post_data
        try:
            response = self._transport(method.upper(), url, body, dict(headers or {}))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # Only a transport failure means "the network failed" (``_is_transport_failure``
            # reads the cause again); anything else raised here (a cassette miss, a bug)
            # must surface as itself.
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"Network error talking to Stripe: {type(exc).__name__}: {exc}",
                should_retry=False,
            ) from exc
        return response.data.decode("utf-8", errors="replace"), response.status, response.headers

    def close(self) -> None:
        if self._pools is not None:
            self._pools.close()
