"""orchestrator.tracing: nothing at all while traces are off; while on, a span per provider
call naming the operation and the provider (never a key), trace ids in log lines, and no
trace started by a lone query.

"On" is a tracer provider of the test's own with an in-memory exporter, put where
``tracing.setup`` would put it: the process's global provider is never set (it can be set
once per process, and the other tests must run with traces off)."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased
from opentelemetry.trace import SpanKind, StatusCode

from orchestrator import tracing
from orchestrator.domain.model import PaymentRequest
from orchestrator.providers.base import OutcomeUnknown
from orchestrator.providers.observed import ObservedProvider
from orchestrator.services.accept import keyed_claim
from orchestrator.services.api_keys import KEY_PREFIX
from tests.harness import containers
from tests.unit.test_observed_provider_operations import StubProvider, _exercise

PARENT = "00-8aad7a313efeb0a9fd87e698589543c1-07fb774d483339ea-01"


@pytest.fixture
def exported(monkeypatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(root=tracing._TracedWorkOnly()))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_provider", provider)
    yield exporter
    provider.shutdown()


def test_with_no_endpoint_nothing_is_set_up_and_every_helper_does_nothing(monkeypatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not tracing.enabled()
    assert tracing.setup("payorch-test") is False
    assert not tracing.enabled()
    assert tracing.current_traceparent() is None
    assert tracing.message_headers(PARENT) == {}
    with tracing.provider_call("create", "stripe", "pay_1") as span:
        assert span is None
    event = {"event": "payment_accepted"}
    assert tracing.add_trace_ids(None, "info", event) == {"event": "payment_accepted"}


def test_each_provider_call_is_a_span_naming_its_operation_and_provider_never_its_key(
    exported,
) -> None:
    tracer = tracing._provider.get_tracer("test")  # type: ignore[union-attr]
    with tracer.start_as_current_span("run/payorch.process_payment", kind=SpanKind.CONSUMER):
        _exercise(ObservedProvider(StubProvider(), lambda call: None))

    spans = exported.get_finished_spans()
    task = next(span for span in spans if span.name == "run/payorch.process_payment")
    calls = [span for span in spans if span is not task]
    assert [span.name for span in calls] == [
        "provider create",
        "provider confirm",
        "provider capture",
        "provider cancel",
        "provider refund",
        "provider retrieve_refund",
        "provider list_refunds",
    ]
    for span in calls:
        assert span.parent is not None and span.parent.span_id == task.context.span_id
        assert span.attributes["payorch.provider"] == "stub"
        # The derived keys the calls sent (payorch-op-c-capture-1, …) are in no attribute.
        assert not any("payorch-" in str(value) for value in span.attributes.values())
    create = calls[0]
    assert create.attributes["payorch.payment_id"] == "pay_1"
    assert "payorch.payment_id" not in calls[2].attributes  # a capture names no payment


def test_a_failed_provider_call_is_recorded_on_its_span_and_passes_through(exported) -> None:
    inner = StubProvider()
    inner.fail_with = OutcomeUnknown("timed out")
    tracer = tracing._provider.get_tracer("test")  # type: ignore[union-attr]
    with (
        tracer.start_as_current_span("task", kind=SpanKind.CONSUMER),
        pytest.raises(OutcomeUnknown),
    ):
        ObservedProvider(inner).retrieve_refund("re_1")

    [call] = [span for span in exported.get_finished_spans() if span.name.startswith("provider")]
    assert call.status.status_code is StatusCode.ERROR
    assert [event.name for event in call.events] == ["exception"]


def test_a_message_carries_the_payments_trace_context_as_its_traceparent_header(
    exported,
) -> None:
    assert tracing.message_headers(PARENT) == {"traceparent": PARENT}
    assert tracing.message_headers(None) == {}


def test_log_lines_carry_the_current_trace_and_span_ids(exported) -> None:
    tracer = tracing._provider.get_tracer("test")  # type: ignore[union-attr]
    with tracer.start_as_current_span("request", kind=SpanKind.SERVER) as span:
        event = tracing.add_trace_ids(None, "info", {"event": "payment_accepted"})
        parent = tracing.current_traceparent()
    context = span.get_span_context()
    assert event["trace_id"] == f"{context.trace_id:032x}"
    assert event["span_id"] == f"{context.span_id:016x}"
    # W3C traceparent: version, trace id, parent span id, flags (sampled among them).
    assert parent is not None
    assert parent.startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    assert int(parent.rsplit("-", 1)[1], 16) & 1 == 1
    # Outside any span: no ids.
    assert tracing.add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}


def test_a_query_outside_any_traced_work_starts_no_trace(exported) -> None:
    tracer = tracing._provider.get_tracer("test")  # type: ignore[union-attr]
    with tracer.start_as_current_span("SELECT 1", kind=SpanKind.CLIENT) as lone:
        assert not lone.is_recording()
    with (
        tracer.start_as_current_span("POST /v1/payments", kind=SpanKind.SERVER),
        tracer.start_as_current_span("INSERT", kind=SpanKind.CLIENT) as query,
    ):
        assert query.is_recording()
    assert [span.name for span in exported.get_finished_spans()] == [
        "INSERT",
        "POST /v1/payments",
    ]
    assert trace.get_current_span() is trace.INVALID_SPAN


def _claim_values() -> dict[str, object]:
    claim = keyed_claim(
        datetime.now(UTC),
        containers.test_settings("sqlite://"),
        f"{KEY_PREFIX}unit-test-key",
        "order-42",
        PaymentRequest(amount=1000, currency="usd", payment_method="pm_card_visa"),
        "fingerprint",
    )
    assert claim is not None
    return claim.values


def test_the_accept_stores_the_request_span_as_the_payments_traceparent(exported) -> None:
    tracer = tracing._provider.get_tracer("test")  # type: ignore[union-attr]
    with tracer.start_as_current_span("POST /v1/payments", kind=SpanKind.SERVER) as span:
        values = _claim_values()
    context = span.get_span_context()
    assert str(values["traceparent"]).startswith(
        f"00-{context.trace_id:032x}-{context.span_id:016x}-"
    )


def test_while_traces_are_off_the_accept_names_no_traceparent_column() -> None:
    # The claim's statement is built per column set: off, it is the statement it always was.
    assert "traceparent" not in _claim_values()


def test_a_key_in_a_request_query_is_in_no_span_attribute_only_its_tag(exported) -> None:
    app = FastAPI()

    @app.get("/v1/payments")
    def find(idempotency_key: str) -> dict[str, str]:
        return {"found": "no"}

    tracing.instrument_app(app, key_tag=lambda key: f"tag-of-{len(key)}")
    raw_key = "order 42/ä&x"

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.get(
                "/v1/payments", params={"idempotency_key": raw_key, "limit": "3"}
            )

    assert asyncio.run(get()).status_code == 200

    [span] = exported.get_finished_spans()  # one per request: no receive/send spans
    shown = {name: str(value) for name, value in span.attributes.items()}
    encoded = urllib.parse.quote_plus(raw_key)
    # As sent, decoded, and as the instrumentation shows a URL (percent-decoded, "+" kept).
    spellings = {raw_key, encoded, urllib.parse.unquote(encoded)}
    for value in shown.values():
        for spelling in spellings:
            assert spelling not in value
    urls = [value for value in shown.values() if "limit=3" in value]
    assert urls, shown  # the query is still shown, its key as the tag
    assert all(f"idempotency_key=hmac:tag-of-{len(raw_key)}" in value for value in urls)
