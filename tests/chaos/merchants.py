"""Merchant back-ends, as the chaos suite models them.

A *logical payment* is one thing a merchant wants to charge: one Idempotency-Key and one body.
The merchant sends it 1-4 times, some of the sends at the same moment (a double-clicked button,
two app servers racing), the rest later (a retry after a timeout, a queue redelivery).  Every
single send is itself retried the way a careful HTTP client retries: on a 5xx, a connection
error or a timeout, after full-jitter backoff, with the same key and the same body.  Any other
answer than 200/202 is a bug the suite reports (a 4xx here can only mean the API confused two
sends of one payment).

Everything random comes from ``random.Random(seed)`` per logical payment, so the plan (keys,
amounts, cards, how many sends, which run together) is the same on every run; only the
interleaving with the workers differs, and the invariants must hold for any interleaving.

What a merchant pays with depends on the provider (``Methods``): the Stripe simulator's test
cards by default, or another provider's methods, currencies and the fields its payments
need (an Adyen payment names its connector account, a customer and a return URL).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx

SUCCEEDING_CARDS = ("pm_card_visa", "pm_card_mastercard", "pm_card_amex", "pm_card_visa_debit")
DECLINING_CARDS = (
    "pm_card_chargeDeclined",
    "pm_card_chargeDeclinedInsufficientFunds",
    "pm_card_chargeDeclinedLostCard",
    "pm_card_chargeDeclinedFraudulent",
)
DECLINE_SHARE = 0.2


@dataclass(frozen=True)
class Methods:
    """What the merchants pay with at one provider: ``declining`` methods fail every payment
    (a card decline), ``succeeding`` ones never do; ``fields`` go into every body."""

    succeeding: tuple[str, ...]
    declining: tuple[str, ...]
    currencies: tuple[str, ...]
    fields: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))


STRIPE_METHODS = Methods(SUCCEEDING_CARDS, DECLINING_CARDS, ("usd", "eur", "gbp"))

# Retries of one send.  Generous: a broker restart or a PostgreSQL hiccup of another test
# session must not exhaust them (about a minute of backoff in all).
MAX_TRIES = 40
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
# A merchant's HTTP timeout.  An accept publishes to RabbitMQ after its commit; with the broker
# down that publish may take PAYORCH_PUBLISH_TIMEOUT_SECONDS before the 202.
REQUEST_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True)
class LogicalPayment:
    index: int
    key: str
    body: dict[str, Any]
    sends: int
    together: int  # how many of the sends start at the same moment
    expected: str  # succeeded | failed | needs_attention
    forced: bool = False  # the test parks it on purpose (needs_attention)


@dataclass(frozen=True)
class Answer:
    key: str
    status: int
    payment_id: str | None
    payment_status: str | None
    replayed: bool
    tries: int
    started: float  # time.monotonic() of the first try
    finished: float


@dataclass
class Traffic:
    """The outcome of a run: every answer, every failure of the client model itself."""

    answers: list[Answer] = field(default_factory=list)
    # Sends that never got a 200/202 (retries exhausted, or a 4xx): always a bug report.
    failures: list[str] = field(default_factory=list)
    # Every HTTP status seen, including the 5xx the clients retried.
    statuses: list[tuple[float, int]] = field(default_factory=list)
    launched: int = 0
    done: int = 0


def plan_payments(
    seed: int,
    count: int,
    *,
    forced_amount: int,
    forced_count: int,
    methods: Methods = STRIPE_METHODS,
) -> list[LogicalPayment]:
    """``count`` logical payments; ``forced_count`` of them (spread out) carry the amount the
    simulator is told to fail forever, so they must end in needs_attention."""
    forced_at = {round((i + 0.5) * count / forced_count) for i in range(forced_count)}
    plan: list[LogicalPayment] = []
    for index in range(count):
        rng = random.Random(f"{seed}:{index}")
        declined = rng.random() < DECLINE_SHARE
        forced = index in forced_at
        card = rng.choice(methods.declining if declined and not forced else methods.succeeding)
        amount = forced_amount if forced else rng.randrange(100, 100_000)
        if amount == forced_amount and not forced:
            amount += 1
        sends = rng.choices((1, 2, 3, 4), weights=(3, 3, 2, 2))[0]
        together = rng.randint(1, sends) if sends > 1 and rng.random() < 0.5 else 1
        expected = "needs_attention" if forced else ("failed" if declined else "succeeded")
        body: dict[str, Any] = {
            "amount": amount,
            "currency": rng.choice(methods.currencies),
            "payment_method": card,
            "customer_reference": f"cus_{index:05d}",
            "metadata": {"order": f"order-{seed}-{index}"},
            **methods.fields,
        }
        plan.append(
            LogicalPayment(
                index=index,
                key=f"chaos-{seed}-{index:05d}",
                body=body,
                sends=sends,
                together=together,
                expected=expected,
                forced=forced,
            )
        )
    return plan


class Merchants:
    """Sends the planned payments at ``rate`` logical payments per second (``run``)."""

    def __init__(
        self,
        api_url: str,
        api_key: str,
        plan: list[LogicalPayment],
        *,
        rate: float,
        max_in_flight: int,
    ) -> None:
        self.api_url = api_url
        self.api_key = api_key
        self.plan = plan
        self.rate = rate
        self.max_in_flight = max_in_flight
        self.traffic = Traffic()

    async def run(self) -> Traffic:
        limits = httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=20)
        # At most max_in_flight requests are handed to httpx at once; the rest wait here.
        # httpcore's pool rescans every queued request against every connection each time a
        # connection frees up: with hundreds queued (every send of a 600-payment storm on a
        # CPU-starved machine) that scan held the GIL of this process, which is also the
        # API's, and the API stopped answering (py-spy: the merchants' thread in
        # _assign_requests_to_connections, every API thread idle).
        self._slots = asyncio.Semaphore(self.max_in_flight)
        async with httpx.AsyncClient(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=REQUEST_TIMEOUT_SECONDS,
            limits=limits,
            trust_env=False,
        ) as client:
            start = time.monotonic()
            tasks = []
            for payment in self.plan:
                # A fixed schedule, not "as fast as possible": the run lasts long enough for
                # the test to kill, pause and disconnect things while merchants keep sending.
                delay = start + payment.index / self.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(self._logical(client, payment)))
                self.traffic.launched += 1
            await asyncio.gather(*tasks)
        return self.traffic

    async def _logical(self, client: httpx.AsyncClient, payment: LogicalPayment) -> None:
        rng = random.Random(f"sends:{payment.key}")
        try:
            await asyncio.gather(
                *(self._send(client, payment, rng) for _ in range(payment.together))
            )
            for _ in range(payment.sends - payment.together):
                await asyncio.sleep(rng.uniform(0.05, 1.5))
                await self._send(client, payment, rng)
        finally:
            self.traffic.done += 1

    async def _send(
        self, client: httpx.AsyncClient, payment: LogicalPayment, rng: random.Random
    ) -> None:
        started = time.monotonic()
        last = "no answer"
        for tries in range(1, MAX_TRIES + 1):
            try:
                async with self._slots:
                    response = await client.post(
                        "/v1/payments", json=payment.body, headers={"Idempotency-Key": payment.key}
                    )
            except httpx.TransportError as error:  # connect errors, timeouts, resets
                last = repr(error)
            else:
                self.traffic.statuses.append((time.monotonic(), response.status_code))
                if response.status_code in (200, 202):
                    data = response.json()
                    self.traffic.answers.append(
                        Answer(
                            key=payment.key,
                            status=response.status_code,
                            payment_id=data.get("id"),
                            payment_status=data.get("status"),
                            replayed=response.headers.get("Idempotent-Replayed") == "true",
                            tries=tries,
                            started=started,
                            finished=time.monotonic(),
                        )
                    )
                    return
                last = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code < 500:
                    break  # a merchant does not retry a 4xx: it is a bug, report it
            ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**tries)
            await asyncio.sleep(rng.uniform(0, ceiling))
        self.traffic.failures.append(f"{payment.key}: gave up after {tries} tries; last: {last}")


class InBackground:
    """Runs a coroutine on its own event loop in a thread; ``result()`` joins it."""

    def __init__(self, coroutine: Coroutine[Any, Any, Traffic]) -> None:
        self._coroutine = coroutine
        self._result: Traffic | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="merchants", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = asyncio.run(self._coroutine)
        except BaseException as error:  # re-raised in the test's thread
            self._error = error

    def result(self, timeout: float) -> Traffic:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the merchants did not finish within {timeout}s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result
