"""Traces (issue 44's acceptance, decision 0102): one payment through ``payorch api``, the
dispatcher (hosted by ``payorch sweeper``) and a ``payorch worker`` process, each exporting
over OTLP/HTTP to a receiver in this test, is one trace: the request's span, the Celery
task's span and a span for each call the provider received, joined parent to child.  No
attribute of any span names the raw idempotency key; the request's span names its HMAC tag.

The dispatcher's message carries no trace context: the worker joins the trace from the
payment's row, which is the path the sweeper's wake-ups take too.  The exporters' schedule
is longer than the test: every span the receiver holds is one its process flushed when it
was stopped.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from orchestrator.logging import key_digest
from tests.harness.containers import TEST_SECRET_KEY
from tests.harness.stack import running_stack, wait_for_output
from tests.support.private_servers import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.broker]

TASK_SPAN = "run/payorch.process_payment"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, str]


class OtlpReceiver:
    """POST /v1/traces, protobuf, as an OpenTelemetry Collector takes it."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def take(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=resource.get("service.name", ""),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                        )
                    )
        with self._lock:
            self.spans.extend(received)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _attributes(pairs: Any) -> dict[str, str]:
    return {pair.key: _shown(pair.value) for pair in pairs}


def _shown(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    if kind == "array_value":
        return repr([_shown(item) for item in value.array_value.values])
    if kind == "kvlist_value":
        return repr({pair.key: _shown(pair.value) for pair in value.kvlist_value.values})
    return str(getattr(value, kind))


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


# The default pool (threads, in processes forked by the worker's supervisor) and prefork,
# whose children Celery forks from a process whose traces are already set up.
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_one_payment_is_one_trace_from_the_request_through_the_task_to_each_provider_call(
    make_postgres_database, make_broker_url, processes, receiver, pool
):
    # The raw key: were it in any attribute, this unlikely string would be found there.
    raw_key = f"order-trace-{uuid.uuid4().hex}"
    with running_stack(make_postgres_database(), make_broker_url(), dispatcher=False) as stack:
        env = {
            **stack.env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            # No batch leaves on the schedule during the test: every span the receiver
            # gets was flushed by its process on the way out (stop_all below).
            "OTEL_BSP_SCHEDULE_DELAY": "600000",
        }
        port = free_port()
        api = processes.payorch("api", "--port", str(port), name="api", env=env)
        wait_for_output(api, "api_listening", timeout=60)
        worker = processes.payorch(
            "worker", f"--pool={pool}", "--loglevel=INFO", name="worker", env=env
        )
        wait_for_output(worker, "ready.", timeout=60)
        sweeper = processes.payorch("sweeper", name="sweeper", env=env)
        wait_for_output(sweeper, "dispatcher_listening", timeout=60)

        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {stack.merchant_key}"},
            timeout=30,
            trust_env=False,
        ) as client:
            accepted = client.post(
                "/v1/payments",
                json={"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"},
                headers={"Idempotency-Key": raw_key},
            )
            assert accepted.status_code == 202, accepted.text
            payment_id = accepted.json()["id"]
        final = stack.wait_final(payment_id)
        assert final["status"] == "succeeded"
        provider_operations = Counter(
            request["operation"] for request in stack.provider_requests(payment_id)
        )
        # Every process flushes its spans on its way out (SIGTERM).
        assert receiver.spans == []
        processes.stop_all()
        for process in (worker, sweeper):
            assert process.returncode == 0, process.tail()

    [request_span] = [
        span
        for span in receiver.spans
        if span.service == "payorch-api"
        and span.attributes.get("http.route") == "/v1/payments"
        and not span.parent_span_id
    ]
    trace_id = request_span.trace_id
    in_trace = [span for span in receiver.spans if span.trace_id == trace_id]

    # One trace: a single root, every other span's parent in the same trace.
    span_ids = {span.span_id for span in in_trace}
    assert [span.span_id for span in in_trace if not span.parent_span_id] == [request_span.span_id]
    assert all(span.parent_span_id in span_ids for span in in_trace if span.parent_span_id)

    [task_span] = [span for span in in_trace if span.name == TASK_SPAN]
    assert task_span.service == "payorch-worker"
    assert [span for span in receiver.spans if span.name == TASK_SPAN] == [task_span]

    provider_spans = [span for span in in_trace if "payorch.provider.operation" in span.attributes]
    assert provider_operations, "the provider received no call"
    assert (
        Counter(span.attributes["payorch.provider.operation"] for span in provider_spans)
        == provider_operations
    )
    for span in provider_spans:
        assert span.service == "payorch-worker"
        assert span.attributes["payorch.provider"] == "stripe"
        assert span.attributes["payorch.payment_id"] == payment_id
        assert _descends_from(span, task_span, in_trace)

    # The key only as its HMAC tag, on the request's span; raw nowhere.
    assert request_span.attributes["payorch.idempotency_key_hmac"] == key_digest(
        TEST_SECRET_KEY, raw_key
    )
    for span in receiver.spans:
        assert raw_key not in span.name
        for name, value in span.attributes.items():
            assert raw_key not in value, (span.name, name)


def _descends_from(span: ReceivedSpan, ancestor: ReceivedSpan, spans: list[ReceivedSpan]) -> bool:
    by_id = {candidate.span_id: candidate for candidate in spans}
    current: ReceivedSpan | None = span
    while current is not None and current.parent_span_id:
        if current.parent_span_id == ancestor.span_id:
            return True
        current = by_id.get(current.parent_span_id)
    return False
