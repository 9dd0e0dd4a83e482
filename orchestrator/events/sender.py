"""One webhook attempt over HTTP (httpx), to an address checked just before connecting.

Error tree of an attempt (every branch is an ``AttemptResult``, never an exception)::

    RefusedUrl (url_rules)        -> refused_target   (nothing was sent)
    the attempt's deadline fired  -> timeout          (whatever was received: the
                                                       connection was shut at the deadline)
    httpx.TimeoutException        -> timeout          (connect, write or read timeout)
    httpx.ConnectError            -> connect_error    (refused, unreachable, TLS failure)
    other httpx.HTTPError         -> error
    a response: 2xx               -> delivered
                410               -> gone
                anything else     -> http_error       (3xx included: redirects are never
                                                       followed, the Location is recorded)

Pinning: the request goes to the checked IP address with the original ``Host`` header and,
for https, the original name as SNI and for certificate verification (httpcore's
``sni_hostname`` extension), so the HTTP client never resolves the name a second time.
The deadline: an attempt (connect, TLS, request, response headers and body) ends at
``connect_timeout + timeout`` after it began, enforced by a watchdog that shuts its socket
down (``orchestrator.events.deadline``; decision 0080).  httpx's own timeouts stay as they
are, bounding each socket operation; they are no total deadline.

Keep-alive is off: a pooled connection is keyed by IP, and reusing one made for another
host's name (shared IPs behind a CDN) would skip that host's certificate check.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import httpx

from orchestrator.domain.webhooks import AttemptOutcome
from orchestrator.events.deadline import AttemptDeadline
from orchestrator.events.url_rules import (
    DEFAULT_ALLOWED_PORTS,
    DEFAULT_DNS_TIMEOUT_SECONDS,
    RefusedUrl,
    Resolver,
    parse_url,
    resolve_target,
)

STORED_BODY_CHARS = 1024
USER_AGENT = "payorch-webhooks/1 (+https://www.standardwebhooks.com)"


@dataclass(frozen=True)
class AttemptResult:
    outcome: AttemptOutcome
    status_code: int | None
    latency_ms: int
    response_body: str | None = None
    error: str | None = None


class WebhookSender:
    def __init__(
        self,
        *,
        allow_private: bool,
        resolver: Resolver,
        allowed_ports: Collection[int] = DEFAULT_ALLOWED_PORTS,
        dns_timeout: float = DEFAULT_DNS_TIMEOUT_SECONDS,
        connect_timeout: float,
        timeout: float,
        max_response_bytes: int,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._resolver = resolver
        self._allowed_ports = allowed_ports
        self._dns_timeout = dns_timeout
        # The attempt's hard deadline, from the connect's start to the body's last byte.
        self.deadline_seconds = connect_timeout + timeout
        self._max_bytes = max_response_bytes
        self._client = httpx.Client(
            transport=transport,
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the pinned address is the peer
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def close(self) -> None:
        self._client.close()

    def send(self, url: str, body: str, headers: Mapping[str, str]) -> AttemptResult:
        started = time.monotonic()

        def elapsed_ms() -> int:
            return int((time.monotonic() - started) * 1000)

        try:
            parsed = parse_url(
                url, allow_private=self._allow_private, allowed_ports=self._allowed_ports
            )
            target = resolve_target(
                parsed,
                allow_private=self._allow_private,
                resolver=self._resolver,
                timeout=self._dns_timeout,
            )
        except RefusedUrl as error:
            return AttemptResult(
                AttemptOutcome.REFUSED_TARGET, None, elapsed_ms(), error=str(error)
            )
        request_headers = {
            **headers,
            "Host": parsed.netloc.decode("ascii"),
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        }
        extensions: dict[str, object] = (
            {"sni_hostname": parsed.host} if parsed.scheme == "https" else {}
        )
        with AttemptDeadline(self.deadline_seconds) as deadline:
            extensions["trace"] = deadline.trace
            result = self._exchange(parsed, target.address, body, request_headers, extensions)
            expired = deadline.finish()
        if expired:
            return AttemptResult(
                AttemptOutcome.TIMEOUT,
                None,
                elapsed_ms(),
                error=(
                    f"no complete answer within the attempt's deadline "
                    f"({self.deadline_seconds:g} s): the connection was closed"
                ),
            )
        return replace(result, latency_ms=elapsed_ms())

    def _exchange(
        self,
        url: httpx.URL,
        address: str,
        body: str,
        headers: Mapping[str, str],
        extensions: dict[str, object],
    ) -> AttemptResult:
        """The POST and its answer (latency filled in by ``send``)."""
        try:
            with self._client.stream(
                "POST",
                url.copy_with(host=address),
                content=body.encode("utf-8"),
                headers=headers,
                extensions=extensions,
            ) as response:
                text = self._read_capped(response)
                return self._verdict(response, text, 0)
        except httpx.TimeoutException as error:
            return AttemptResult(AttemptOutcome.TIMEOUT, None, 0, error=_describe(error))
        except httpx.ConnectError as error:
            return AttemptResult(AttemptOutcome.CONNECT_ERROR, None, 0, error=_describe(error))
        except httpx.HTTPError as error:
            return AttemptResult(AttemptOutcome.ERROR, None, 0, error=_describe(error))

    def _read_capped(self, response: httpx.Response) -> str:
        """At most ``max_response_bytes`` of the answer (the deadline bounds the time); what
        is left is dropped with the connection (a huge or endless answer costs nothing)."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= self._max_bytes:
                break
        return b"".join(chunks)[: self._max_bytes].decode("utf-8", errors="replace")

    @staticmethod
    def _verdict(response: httpx.Response, text: str, latency_ms: int) -> AttemptResult:
        stored = text[:STORED_BODY_CHARS] or None
        code = response.status_code
        if 200 <= code < 300:
            return AttemptResult(AttemptOutcome.DELIVERED, code, latency_ms, stored)
        if code == 410:
            return AttemptResult(
                AttemptOutcome.GONE, code, latency_ms, stored, error="410 Gone: endpoint disabled"
            )
        error = f"HTTP {code}"
        if 300 <= code < 400:
            location = response.headers.get("location", "")[:200]
            error = f"HTTP {code}: redirects are not followed (Location: {location})"
        return AttemptResult(AttemptOutcome.HTTP_ERROR, code, latency_ms, stored, error=error)


def _describe(error: httpx.HTTPError) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]
