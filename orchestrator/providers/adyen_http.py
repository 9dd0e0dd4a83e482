"""Adyen's HTTP seam: the client Adyen's library sends through, on our urllib3 pools.

The library (``Adyen.httpclient.HTTPClient``) calls ``requests.request`` with a fresh
connection per call, ignores ``SSL_CERT_FILE`` and takes one timeout for connect and read.
Its documented seam is the client's ``request`` method; ``AdyenHttp`` fills it with the
same pools, TLS context and proxy rules as the Stripe adapter (``http_pools``): a connect
timeout and a read timeout of our own, keep-alive per thread, a private CA honoured.

Only a transport failure (urllib3's or the socket's error) is raised as
``TransportFailure``; anything else raised while sending (a cassette miss, a bug) surfaces
as itself, so it is never mistaken for a timeout (``adyen_errors``).
"""

from __future__ import annotations

import json as json_lib
from collections.abc import Mapping
from typing import Any

import urllib3

from orchestrator.providers.http_pools import ThreadPools, Transport


class TransportFailure(Exception):
    """The request may or may not have reached Adyen: a refused or timed-out connect, a
    read timeout, a reset.  ``adyen_errors`` makes it an unknown outcome."""


class AdyenHttp:
    """Stands in for the library's ``HTTPClient`` (same ``request`` signature and answer)."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        transport: Transport | None = None,
        user_agent: str = "payorch",
    ) -> None:
        self._pools: ThreadPools | None = None
        if transport is None:
            self._pools = ThreadPools(urllib3.Timeout(connect=connect_timeout, read=read_timeout))
            transport = self._pools
        self._transport = transport
        self.user_agent = user_agent

    def request(
        self,
        method: str,
        url: str,
        json: Any = None,
        data: Any = None,
        username: str = "",
        password: str = "",
        xapikey: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[str, Any, int, dict[str, str]]:
        """Send one request; answer (body text, the request as sent, status, headers)."""
        sent = dict(headers or {})
        if xapikey:
            sent["X-API-Key"] = xapikey
        elif username or password:
            # Basic auth is the library's other scheme; payorch's accounts use API keys.
            raise TransportFailure("payorch sends Adyen requests with an API key only")
        sent["User-Agent"] = self.user_agent
        body: bytes | None = None
        if json is not None:
            body = json_lib.dumps(json, separators=(",", ":")).encode("utf-8")
            sent["Content-Type"] = "application/json"
        try:
            response = self._transport(method.upper(), url, body, sent)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransportFailure(
                f"Network error talking to Adyen: {type(exc).__name__}: {exc}"
            ) from exc
        text = response.data.decode("utf-8", errors="replace")
        return text, json, response.status, dict(response.headers)

    def close(self) -> None:
        if self._pools is not None:
            self._pools.close()
