"""The relay: outbox -> deliveries -> signed HTTP attempts, at least once.

One pass (``run_once``, also ``payorch relay --once``) does, each step its own short
transaction:

1. fan-out: unpublished outbox rows become one delivery per subscribed enabled endpoint
   (here, not in the finishing transaction: a payment's finish stays as fast as before
   and knows nothing of endpoints; an endpoint registered before the fan-out still gets
   the event);
2. claim: up to ``RELAY_CONCURRENCY`` due deliveries, leased (``FOR UPDATE SKIP LOCKED``),
   so relays on several hosts never hold the same delivery; at most one per endpoint, and
   none of an endpoint with an attempt in flight (the endpoint is leased with its delivery,
   decision 0080), so a slow endpoint never holds more than one relay thread;
3. attempt each claimed delivery in a thread (no transaction open across the POST, each
   attempt ended by its hard deadline, ``events.deadline``), then record the attempt and the
   delivery's next state in one transaction, fenced by the lease token.

``run`` (the ``payorch relay`` loop) does the same with one thread fanning out and
``RELAY_CONCURRENCY`` threads each claiming and attempting one delivery at a time, so a slow
endpoint holds one thread, not a whole batch.

At least once, never twice at once: a relay killed after the POST but before the record
leaves the delivery leased; the lease expires (``WEBHOOK_LEASE_SECONDS``, at least twice
an attempt's time) and another relay sends it again with the same ``webhook-id`` (the
receiver dedupes).  A relay that is *frozen* (SIGSTOP, a VM pause) for longer than its lease
can still send after another relay took over; its record is then fenced out, but the
receiver may see the two attempts overlap.  Nothing but a smaller pause can prevent that.

A relay is built by ``Container.relay()`` from what it uses: units of work (a read-only
one for the gauges), the settings, the box that opens endpoint secrets and the sender.
"""

from __future__ import annotations

import os
import random
import secrets as token_source
import socket
import threading
import time
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from orchestrator import metrics
from orchestrator.db.repositories.deliveries import AttemptRecord
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.webhooks import (
    AttemptOutcome,
    ClaimedDelivery,
    DeliveryStatus,
    WebhookStats,
)
from orchestrator.events.event_documents import event_body
from orchestrator.events.event_reads import shown_now
from orchestrator.events.schedule import RetryPolicy
from orchestrator.events.secret_box import SecretBox, UnreadableSecret
from orchestrator.events.sender import AttemptResult, WebhookSender
from orchestrator.events.signing import signature_headers
from orchestrator.events.url_rules import Resolver
from orchestrator.logging import get_logger
from orchestrator.settings import Settings

log = get_logger(__name__)

FAN_OUT_BATCH = 200
# The gauges cost two aggregate queries: sampled at most this often.
STATS_INTERVAL_SECONDS = 5.0
# The long-running relay logs what its threads did (``relay_summary``) at most this often,
# and only when they did something: an idle relay writes no line, a busy one one per period.
SUMMARY_INTERVAL_SECONDS = 30.0


def default_relay_name() -> str:
    return f"relay:{socket.gethostname()}:{os.getpid()}:{token_source.token_hex(2)}"


@dataclass
class RelayReport:
    published: int = 0
    deliveries_created: int = 0
    attempted: int = 0
    delivered: int = 0
    retrying: int = 0
    gave_up: int = 0
    fenced: int = 0
    endpoints_disabled: list[str] = field(default_factory=list)

    @property
    def did_something(self) -> bool:
        return bool(self.published or self.attempted)

    def as_dict(self) -> dict[str, object]:
        return {
            "published": self.published,
            "deliveries_created": self.deliveries_created,
            "attempted": self.attempted,
            "delivered": self.delivered,
            "retrying": self.retrying,
            "gave_up": self.gave_up,
            "fenced": self.fenced,
            "endpoints_disabled": self.endpoints_disabled,
        }

    def count(self, verdict: _Verdict) -> None:
        self.attempted += 1
        self.delivered += verdict.delivered
        self.retrying += verdict.retrying
        self.fenced += verdict.fenced
        self.gave_up += verdict.gave_up
        if verdict.disabled_endpoint is not None:
            self.endpoints_disabled.append(verdict.disabled_endpoint)


@dataclass(frozen=True)
class _Verdict:
    delivered: bool
    retrying: bool
    fenced: bool
    disabled_endpoint: str | None

    @property
    def gave_up(self) -> bool:
        return not (self.delivered or self.retrying or self.fenced)


class _Tally:
    """What the delivery threads did since the last ``relay_summary`` and since the start,
    counted under a lock (several threads report)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since_summary = RelayReport()
        self.total = RelayReport()

    def add_published(self, published: int, created: int) -> None:
        with self._lock:
            for report in (self._since_summary, self.total):
                report.published += published
                report.deliveries_created += created

    def add(self, verdict: _Verdict) -> None:
        with self._lock:
            self._since_summary.count(verdict)
            self.total.count(verdict)

    def take(self) -> RelayReport:
        """The counts since the last call, reset."""
        with self._lock:
            taken, self._since_summary = self._since_summary, RelayReport()
        return taken


def build_sender(settings: Settings, resolver: Resolver) -> WebhookSender:
    return WebhookSender(
        allow_private=settings.webhook_private_targets_allowed,
        resolver=resolver,
        allowed_ports=frozenset(settings.webhook_allowed_ports),
        dns_timeout=settings.webhook_dns_timeout_seconds,
        connect_timeout=settings.webhook_connect_timeout_seconds,
        timeout=settings.webhook_timeout_seconds,
        max_response_bytes=settings.webhook_response_max_bytes,
    )


class Relay:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        read_only_uow: UnitOfWorkFactory,
        settings: Settings,
        *,
        box: SecretBox,
        sender: WebhookSender,
        name: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._uow = uow
        self._read_only_uow = read_only_uow
        self._settings = settings
        self.name = name or default_relay_name()
        self._sender = sender
        self._box = box
        self._policy = RetryPolicy(
            base_seconds=settings.webhook_retry_base_seconds,
            cap_seconds=settings.webhook_retry_cap_seconds,
            window_hours=settings.webhook_retry_hours,
        )
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(
            max_workers=settings.relay_concurrency, thread_name_prefix="relay"
        )
        self._stats_sampled_at = 0.0

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._sender.close()

    # -- the loop -----------------------------------------------------------------------

    def run(self, stop: threading.Event, started_with: Mapping[str, object] | None = None) -> None:
        """The long-running relay: ``RELAY_CONCURRENCY`` delivery threads, each claiming one
        delivery at a time, and this thread fanning out the outbox and sampling the gauges.
        One slow endpoint holds one thread, never the others' deliveries (``run_once``'s
        batch waits for its slowest attempt)."""
        settings = self._settings
        idle = settings.relay_idle_seconds
        tally = _Tally()
        workers = [
            threading.Thread(
                target=self._deliver_until, args=(stop, tally), name=f"relay-{n}", daemon=True
            )
            for n in range(settings.relay_concurrency)
        ]
        log.info(
            "relay_started",
            relay=self.name,
            concurrency=settings.relay_concurrency,
            timeout_seconds=settings.webhook_timeout_seconds,
            lease_seconds=settings.webhook_lease_seconds,
            retry_hours=settings.webhook_retry_hours,
            private_targets_allowed=settings.webhook_private_targets_allowed,
            **(started_with or {}),
        )
        for worker in workers:
            worker.start()
        summarised_at = time.monotonic()
        try:
            while not stop.is_set():
                if time.monotonic() - summarised_at >= SUMMARY_INTERVAL_SECONDS:
                    summarised_at = time.monotonic()
                    self._log_summary(tally.take())
                report = RelayReport()
                try:
                    self._fan_out(report)
                    self._sample_stats()
                except Exception:
                    # The database may be down: log, wait, try again (nothing is lost: the
                    # outbox and the deliveries are rows).
                    log.exception("relay_fan_out_failed", relay=self.name)
                    stop.wait(idle * 4)
                    continue
                if report.published:
                    tally.add_published(report.published, report.deliveries_created)
                    log.info(
                        "relay_fan_out",
                        relay=self.name,
                        published=report.published,
                        deliveries_created=report.deliveries_created,
                    )
                else:
                    stop.wait(idle)
        finally:
            stop.set()
            for worker in workers:
                worker.join()
            self._log_summary(tally.take())
            log.info("relay_stopped", relay=self.name, **tally.total.as_dict())

    def _log_summary(self, report: RelayReport) -> None:
        if report.attempted:
            log.info("relay_summary", relay=self.name, **report.as_dict())

    def _deliver_until(self, stop: threading.Event, tally: _Tally) -> None:
        idle = self._settings.relay_idle_seconds
        while not stop.is_set():
            try:
                claimed = self._claim(limit=1)
                for delivery in claimed:
                    tally.add(self._attempt_and_record(delivery))
            except Exception:
                # Database down between the claim and the record: the lease runs out and
                # the delivery is attempted again (same webhook-id).
                log.exception("relay_delivery_failed", relay=self.name)
                stop.wait(idle * 4)
                continue
            if not claimed:
                stop.wait(idle)

    def run_once(self) -> RelayReport:
        report = RelayReport()
        self._fan_out(report)
        verdicts: list[_Verdict] = []
        attempted: set[int] = set()
        # Rounds: a claim takes at most one delivery per endpoint (one attempt in flight
        # each), so an endpoint's further due deliveries come in the next rounds.  A
        # delivery is attempted at most once per pass (a retry due at once waits for the
        # next pass).
        while claimed := self._claim(exclude=attempted):
            attempted.update(c.delivery.id for c in claimed)
            verdicts.extend(self._pool.map(self._attempt_and_record, claimed))
        for verdict in verdicts:
            report.count(verdict)
        self._sample_stats()
        if report.did_something:
            log.info("relay_pass", relay=self.name, **report.as_dict())
        return report

    # -- steps --------------------------------------------------------------------------

    def _fan_out(self, report: RelayReport) -> None:
        while True:
            with self._uow() as uow:
                published, created = uow.deliveries.fan_out(limit=FAN_OUT_BATCH, now=uow.now())
                uow.commit()
            report.published += published
            report.deliveries_created += created
            if published:
                metrics.WEBHOOK_EVENTS_PUBLISHED.inc(published)
            if published < FAN_OUT_BATCH:
                return

    def _claim(
        self, limit: int | None = None, exclude: Collection[int] = ()
    ) -> list[ClaimedDelivery]:
        settings = self._settings
        with self._uow() as uow:
            claimed = uow.deliveries.claim_due(
                owner=self.name,
                exclude=exclude,
                limit=limit or settings.relay_concurrency,
                lease_seconds=settings.webhook_lease_seconds,
                now=uow.now(),
            )
            # A retry after the customer's wait ended does not carry its client secret.  (The
            # idempotency key goes to the merchant who chose it: no read for it here.)
            events = shown_now(uow.payments, [c.event for c in claimed], keys=False)
            uow.commit()
        return [replace(c, event=e) for c, e in zip(claimed, events, strict=True)]

    def _attempt_and_record(self, claimed: ClaimedDelivery) -> _Verdict:
        started_at = datetime.now(UTC)
        result = self._attempt(claimed, signed_at=started_at)
        metrics.WEBHOOK_ATTEMPTS.labels(outcome=result.outcome.value).inc()
        return self._record(claimed, result, started_at)

    def _attempt(self, claimed: ClaimedDelivery, *, signed_at: datetime) -> AttemptResult:
        """Sign with the relay's wall clock (receivers compare the timestamp with theirs);
        judge the old secret's grace period by the database clock, like every deadline."""
        endpoint = claimed.endpoint
        try:
            keys = [self._box.open(endpoint.secret_encrypted)]
            expires = endpoint.previous_secret_expires_at
            in_grace = expires is not None and expires > claimed.claimed_at
            if endpoint.previous_secret_encrypted and in_grace:
                keys.append(self._box.open(endpoint.previous_secret_encrypted))
        except UnreadableSecret as error:
            return AttemptResult(AttemptOutcome.ERROR, None, 0, error=str(error))
        body = event_body(claimed.event)
        headers = signature_headers(claimed.event.public_id, body, keys, timestamp=signed_at)
        return self._sender.send(endpoint.url, body, headers)

    def _next_attempt_at(self, claimed: ClaimedDelivery, now: datetime) -> datetime | None:
        with self._rng_lock:
            return self._policy.next_attempt_at(
                attempts=claimed.delivery.attempts + 1,
                window_started_at=claimed.delivery.window_started_at,
                now=now,
                rng=self._rng,
            )

    def _record(
        self, claimed: ClaimedDelivery, result: AttemptResult, started_at: datetime
    ) -> _Verdict:
        endpoint = claimed.endpoint
        disabled: str | None = None
        with self._uow() as uow:
            now = uow.now()
            if result.outcome is AttemptOutcome.DELIVERED:
                status, next_at = DeliveryStatus.DELIVERED, None
            elif result.outcome is AttemptOutcome.GONE:
                status, next_at = DeliveryStatus.FAILED, None
            else:
                next_at = self._next_attempt_at(claimed, now)
                status = DeliveryStatus.PENDING if next_at is not None else DeliveryStatus.FAILED
            record = AttemptRecord(
                outcome=result.outcome,
                status_code=result.status_code,
                latency_ms=result.latency_ms,
                response_body=result.response_body,
                error=result.error,
                started_at=started_at,
                new_status=status,
                next_attempt_at=next_at,
            )
            held = uow.deliveries.record_attempt(claimed.delivery, record, owner=self.name, now=now)
            if held:
                disabled = self._judge_endpoint(uow, endpoint.id, result.outcome, now)
            uow.commit()
        if not held:
            metrics.FENCED_WRITES.inc()
            log.warning("webhook_attempt_fenced", relay=self.name, delivery=claimed.delivery.id)
        elif status is not DeliveryStatus.DELIVERED:
            # The receiver is down or refusing: each failed attempt says so, and whether
            # it is retried (when) or given up.
            log.warning(
                "webhook_attempt_failed",
                relay=self.name,
                delivery=claimed.delivery.id,
                endpoint=endpoint.id,
                event_id=claimed.event.public_id,
                outcome=result.outcome.value,
                status_code=result.status_code,
                error=result.error,
                attempts=claimed.delivery.attempts + 1,
                next_attempt_at=next_at.isoformat() if next_at is not None else None,
                gave_up=status is DeliveryStatus.FAILED,
            )
        return _Verdict(
            delivered=held and status is DeliveryStatus.DELIVERED,
            retrying=held and status is DeliveryStatus.PENDING,
            fenced=not held,
            disabled_endpoint=disabled,
        )

    def _judge_endpoint(
        self, uow: UnitOfWork, endpoint_id: str, outcome: AttemptOutcome, now: datetime
    ) -> str | None:
        """A success stops the endpoint's failing clock; 410, or failing for the whole
        retry window, disables it (its pending deliveries wait; re-enabling resumes them)."""
        repo = uow.webhook_endpoints
        if outcome is AttemptOutcome.DELIVERED:
            repo.record_success(endpoint_id)
            return None
        if outcome is AttemptOutcome.GONE:
            if repo.disable(endpoint_id, reason="the endpoint answered 410 Gone", now=now):
                metrics.WEBHOOK_ENDPOINTS_DISABLED.labels(reason="gone").inc()
                log.warning("webhook_endpoint_disabled", endpoint=endpoint_id, why="gone")
                return endpoint_id
            return None
        updated = repo.record_failure(endpoint_id, now=now)
        failing_since = None if updated is None else updated.failing_since
        if failing_since is not None and now >= self._policy.window_end(failing_since):
            hours = self._settings.webhook_retry_hours
            reason = f"every attempt failed for {hours:g} h (since {failing_since.isoformat()})"
            if repo.disable(endpoint_id, reason=reason, now=now):
                metrics.WEBHOOK_ENDPOINTS_DISABLED.labels(reason="failing").inc()
                log.warning("webhook_endpoint_disabled", endpoint=endpoint_id, why="failing")
                return endpoint_id
        return None

    def _sample_stats(self) -> None:
        if time.monotonic() - self._stats_sampled_at < STATS_INTERVAL_SECONDS:
            return
        self._stats_sampled_at = time.monotonic()
        publish_stats(self._read_only_uow)


def webhook_stats(read_only_uow: UnitOfWorkFactory) -> tuple[WebhookStats, datetime]:
    with read_only_uow() as uow:
        return uow.deliveries.stats(), uow.now()


def publish_stats(read_only_uow: UnitOfWorkFactory) -> WebhookStats:
    stats, now = webhook_stats(read_only_uow)
    metrics.WEBHOOK_BACKLOG.set(stats.backlog)
    oldest = stats.oldest_pending_created_at
    metrics.WEBHOOK_OLDEST_PENDING_AGE.set(
        0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
    )
    metrics.WEBHOOK_DISABLED_ENDPOINTS.set(stats.disabled_endpoints)
    return stats
