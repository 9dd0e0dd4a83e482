"""Structured JSON logs (structlog), with secrets kept out.

Idempotency keys are merchant-chosen strings that may carry meaning (order numbers,
customer ids); API keys are credentials.  Neither is ever logged raw: API keys not at all,
idempotency keys only as an HMAC under ``SECRET_KEY`` (``key_digest``), which lets an
operator correlate log lines for one key without being able to read it.  SQL errors never
carry their bound parameters into a log line either (the engine hides them): a failed
insert would otherwise print the key, and a failed finish the stored response holding it.

Every line is one JSON object with ``timestamp``, ``level`` and ``event``; the API adds
``request_id`` and, once authenticated, ``client_id``; while traces are on and a span is
current, ``trace_id`` and ``span_id`` (``orchestrator.tracing``).
``capture_standard_logging`` sends the standard library's loggers (uvicorn, Celery, kombu)
through the same renderer, so a long-running process writes nothing but JSON lines.  Both
write through ``orchestrator.log_output``: one ``write`` per complete line, serialised
across the processes and threads sharing stderr, so records from a pool's processes never
run into one another on a line.  Every process role configures its logging with these two
functions, so every role gets that guarantee.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import sys
from typing import Any

import structlog

from orchestrator.log_output import LineHandler, LineLoggerFactory
from orchestrator.settings import Settings
from orchestrator.tracing import add_trace_ids

_configured = False


def key_digest(secret_key: str, idempotency_key: str) -> str:
    """A stable, non-reversible tag for an idempotency key in logs."""
    mac = hmac.new(secret_key.encode(), idempotency_key.encode(), hashlib.sha256)
    return mac.hexdigest()[:24]


def configure_logging(settings: Settings, *, force: bool = False) -> None:
    global _configured
    if _configured and not force:
        return
    level = _level(settings)
    renderer = _renderer(settings)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            # trace_id and span_id while a span is current (traces on: orchestrator.tracing).
            add_trace_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=LineLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def capture_standard_logging(settings: Settings) -> None:
    """Render the standard library's log records (uvicorn, Celery, kombu) as our JSON lines
    on stderr.  For the long-running processes only: it replaces the root logger's
    handlers, which a library or a test runner would not expect."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            add_trace_ids,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _renderer(settings),
        ],
    )
    handler = LineHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(_level(settings))
    # The SDK and the HTTP clients log every request (the SDK and httpx at INFO, three lines
    # per call): noise at our volume, and the protocol logs what matters about each call.
    for chatty in ("stripe", "httpx", "httpcore", "urllib3"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, _level(settings)))
    # Celery writes two lines per task at INFO ("received", "succeeded in"): half of a
    # busy worker's log and a noticeable share of its CPU per payment, for
    # what payorch's own lease_claimed and *_finished lines say with the record's id.
    # Shown at DEBUG; a task's failure (ERROR) always.  Hazard: Celery reads these levels
    # once, when the worker builds its tracers, so they are set before the worker starts.
    per_task_level = logging.WARNING if _level(settings) > logging.DEBUG else logging.DEBUG
    for per_task in ("celery.app.trace", "celery.worker.strategy"):
        logging.getLogger(per_task).setLevel(per_task_level)
    logging.captureWarnings(True)  # a library's warning is a log line like any other


def _level(settings: Settings) -> int:
    return logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)


def _renderer(settings: Settings) -> Any:
    if settings.log_json:
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=False)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
