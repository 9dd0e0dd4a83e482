"""One webhook attempt, through httpx's transport seam (no network at all)."""

from __future__ import annotations

import httpx

from orchestrator.domain.webhooks import AttemptOutcome
from orchestrator.events.sender import WebhookSender


def sender(
    handler, *, resolver=None, allow_private=False, max_bytes=4096, allowed_ports=(443, 8443)
) -> WebhookSender:
    return WebhookSender(
        allow_private=allow_private,
        resolver=resolver or (lambda host, port: ["93.184.216.34"]),
        allowed_ports=frozenset(allowed_ports),
        connect_timeout=1.0,
        timeout=2.0,
        max_response_bytes=max_bytes,
        transport=httpx.MockTransport(handler),
    )


def test_the_request_goes_to_the_checked_address_with_the_original_host_and_sni() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    result = sender(handler).send(
        "https://hooks.merchant.example:8443/in?x=1", "{}", {"webhook-id": "evt_1"}
    )

    assert result.outcome is AttemptOutcome.DELIVERED and result.status_code == 204
    (request,) = seen
    assert request.url.host == "93.184.216.34" and request.url.port == 8443
    assert request.url.path == "/in" and request.url.query == b"x=1"
    assert request.headers["host"] == "hooks.merchant.example:8443"
    assert request.extensions["sni_hostname"] == "hooks.merchant.example"
    assert request.headers["webhook-id"] == "evt_1"


def test_a_stored_url_on_a_port_no_longer_allowed_is_refused_before_anything_is_sent() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    result = sender(handler, allowed_ports=(443,)).send("https://8.8.8.8:25/", "{}", {})

    assert result.outcome is AttemptOutcome.REFUSED_TARGET
    assert result.error is not None and "port" in result.error
    assert seen == []


def test_a_redirect_to_a_private_address_is_recorded_and_never_followed() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://10.0.0.1/admin"})

    result = sender(handler).send("https://hooks.merchant.example/", "{}", {})

    assert result.outcome is AttemptOutcome.HTTP_ERROR and result.status_code == 302
    assert "not followed" in (result.error or "") and "10.0.0.1" in (result.error or "")
    assert [str(r.url.host) for r in seen] == ["93.184.216.34"]


def test_a_name_that_resolves_to_a_private_address_is_refused_before_any_request() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    result = sender(handler, resolver=lambda host, port: ["10.0.0.7"]).send(
        "https://hooks.merchant.example/", "{}", {}
    )

    assert result.outcome is AttemptOutcome.REFUSED_TARGET
    assert "private" in (result.error or "")
    assert seen == []


def test_410_disables_and_other_statuses_are_failures_with_a_truncated_body() -> None:
    assert (
        sender(lambda r: httpx.Response(410)).send("https://h.example/", "{}", {}).outcome
        is AttemptOutcome.GONE
    )
    result = sender(lambda r: httpx.Response(503, content=b"x" * 5000)).send(
        "https://h.example/", "{}", {}
    )
    assert result.outcome is AttemptOutcome.HTTP_ERROR and result.status_code == 503
    assert result.response_body == "x" * 1024


def test_a_huge_answer_is_read_only_up_to_the_cap() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter([b"y" * 1024] * 1000))

    result = sender(handler, max_bytes=2048).send("https://h.example/", "{}", {})
    assert result.outcome is AttemptOutcome.DELIVERED
    assert len(result.response_body or "") <= 1024


def test_timeouts_and_refused_connections_are_outcomes_not_exceptions() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert sender(timeout).send("https://h.example/", "{}", {}).outcome is AttemptOutcome.TIMEOUT
    assert (
        sender(refused).send("https://h.example/", "{}", {}).outcome is AttemptOutcome.CONNECT_ERROR
    )
