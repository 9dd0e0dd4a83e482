"""OpenTelemetry traces: set up once per process, and only when asked for.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the standard variable; the SDK reads it
and the other ``OTEL_*`` variables itself): without it nothing is set up, no exporter
exists, and every helper here returns at its first test of ``enabled()``.  With it, each
long-running process (``setup``: the API's server processes, each worker process, the
sweeper with its dispatcher, the relay) has a tracer provider that batches spans to the
collector over OTLP/HTTP, and psycopg's queries are spans.

One trace per payment (decision 0102):

* the API's request span (FastAPI's instrumentation, ``instrument_app``) is current when
  the accept builds the row: ``current_traceparent`` is stored in ``payments.traceparent``;
* the worker's task span (Celery's instrumentation) takes its parent from the message's
  ``traceparent`` header; a wake-up that carries none (the dispatcher's and the sweeper's
  messages are built from ids and tokens) gets the row's, read before the span starts
  (``workers.trace_join``);
* each provider call is a span under the task's (``provider_call``, in the providers'
  ``ObservedProvider``).

Hazards:

* keys: idempotency keys appear only as their HMAC tag (``tag_idempotency_key``, and a
  key in a URL's query: ``instrument_app``); the instrumentations capture no header (the
  key travels in ``Idempotency-Key``) and no bound parameter of a query (psycopg's
  ``capture_parameters`` stays off);
* a process that forks after ``setup`` (a prefork pool) gets the provider with it: the
  SDK's batch processor restarts its thread in the child; ``shutdown`` must run before a
  process exits without ``atexit`` (a pool child), or its last spans are lost;
* root spans: a query outside any traced work (a sweep pass, the dispatcher's liveness
  check) would each be a trace of one span; the sampler drops a root span that is a
  client call (``_TracedWorkOnly``), so traces start at requests and tasks.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
TRACER_NAME = "payorch"
# The W3C header and the row's column hold the same string.
TRACEPARENT = "traceparent"
# Health checks and scrapes: a trace per load-balancer poll would bury the payments.
EXCLUDED_URLS = "/healthz,/readyz,/metrics"
# The query parameter that carries an idempotency key (a merchant's look-up by key, the
# operators' filter): shown in spans only as its HMAC tag.
KEY_PARAMETER = "idempotency_key"

_provider: TracerProvider | None = None


def requested() -> bool:
    """Whether this process's environment asks for traces."""
    return bool(os.environ.get(ENDPOINT_VARIABLE) or os.environ.get(TRACES_ENDPOINT_VARIABLE))


def enabled() -> bool:
    return _provider is not None


def setup(service_name: str) -> bool:
    """The process's tracer provider and the psycopg instrumentation, once; nothing when no
    endpoint is set.  True when traces are on."""
    global _provider
    if _provider is not None:
        return True
    if not requested():
        return False
    # Imported here: the exporter and the instrumentation are not loaded while traces are off.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: service_name}),
        sampler=ParentBased(root=_TracedWorkOnly()),
    )
    # The schedule delay, batch sizes and export timeout come from OTEL_BSP_* variables.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    _provider = provider
    return True


def shutdown() -> None:
    """Export what is buffered and stop (a process's last act; ``atexit`` does it too, but
    a pool child may leave without it)."""
    if _provider is not None:
        _provider.shutdown()


def flush() -> None:
    """Export what is buffered, and keep going (a pool child about to exit)."""
    if _provider is not None:
        _provider.force_flush()


def instrument_app(app: Any, key_tag: Callable[[str], str]) -> None:
    """FastAPI's server spans for ``app``, one per request (not one per ASGI message).  No
    request or response header is captured (the instrumentation's default, kept:
    ``Idempotency-Key`` and ``Authorization``).  The URL is: a key in the query
    (``GET /v1/payments?idempotency_key=…``) is replaced by ``key_tag(key)``, its HMAC tag,
    in every attribute that holds the URL."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    def hide_keys(span: trace.Span, scope: dict[str, Any]) -> None:
        _hide_query_keys(span, scope, key_tag)

    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=_provider,
        excluded_urls=EXCLUDED_URLS,
        server_request_hook=hide_keys,
        exclude_spans=["receive", "send"],
    )


def _hide_query_keys(
    span: trace.Span, scope: dict[str, Any], key_tag: Callable[[str], str]
) -> None:
    """Every spelling of a query's idempotency key (raw, percent-decoded) in the span's
    string attributes, replaced by its tag."""
    query = scope.get("query_string") or b""
    if KEY_PARAMETER.encode() not in query or not span.is_recording():
        return
    raw_query = query.decode("latin-1")
    spellings: dict[str, str] = {}
    for pair in raw_query.split("&"):
        name, _, raw_value = pair.partition("=")
        if urllib.parse.unquote_plus(name) != KEY_PARAMETER or not raw_value:
            continue
        value = urllib.parse.unquote_plus(raw_value)
        tag = f"hmac:{key_tag(value)}"
        for spelling in (raw_value, value, urllib.parse.unquote(raw_value)):
            spellings[spelling] = tag
    attributes = getattr(span, "attributes", None) or {}
    for name, shown in list(attributes.items()):
        if not isinstance(shown, str):
            continue
        hidden = shown
        # Longest first: a spelling that contains another is replaced whole.
        for spelling in sorted(spellings, key=len, reverse=True):
            hidden = hidden.replace(spelling, spellings[spelling])
        if hidden != shown:
            span.set_attribute(name, hidden)


def instrument_celery() -> None:
    """Celery's task spans in a worker process (their parent from the message's headers)."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    instrumentor.instrument(tracer_provider=_provider, skip_dep_check=True)


def current_traceparent() -> str | None:
    """The current span's context as a W3C ``traceparent`` (None: traces off, no span)."""
    if _provider is None:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get(TRACEPARENT)


def message_headers(traceparent: str | None) -> dict[str, str]:
    """A message's headers carrying ``traceparent`` (empty without one, or while traces
    are off)."""
    return {TRACEPARENT: traceparent} if traceparent and _provider is not None else {}


def tag_idempotency_key(key_tag: str) -> None:
    """Name the idempotency key on the current span by its HMAC tag, never the key."""
    if _provider is None:
        return
    trace.get_current_span().set_attribute("payorch.idempotency_key_hmac", key_tag)


@contextlib.contextmanager
def provider_call(
    operation: str, provider: str, payment_id: str | None
) -> Iterator[trace.Span | None]:
    """A span around one provider call, named by its operation and provider (never a key:
    the adapters' idempotency keys are not attributes).  Exceptions are recorded on it and
    propagate unchanged."""
    if _provider is None:
        yield None
        return
    attributes: dict[str, str] = {
        "payorch.provider": provider,
        "payorch.provider.operation": operation,
    }
    if payment_id is not None:
        attributes["payorch.payment_id"] = payment_id
    tracer = _provider.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"provider {operation}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def add_trace_ids(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: ``trace_id`` and ``span_id`` when a span is current."""
    if _provider is None:
        return event
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = trace.format_trace_id(context.trace_id)
        event["span_id"] = trace.format_span_id(context.span_id)
    return event


class _TracedWorkOnly(Sampler):
    """Root spans: keep those of work (a request, a task), drop a lone client call
    (a query outside any traced work)."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if kind is SpanKind.CLIENT:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "payorch traced work only"
