"""Merchants' traffic for the demo: what real integrations do to an idempotent API.

Every logical payment is sent 1-4 times with the same Idempotency-Key, sometimes all at
once (a client that fired twice, a load balancer that retried), sometimes one after
another with jitter (a client that timed out and tried again).  A send that meets a 5xx
or a broken connection is retried with the same key, as a careful client would.  Then
the client polls the payment until it is final, honouring ``Retry-After``.

Every fourth payment (3-D Secure ones aside) is a second merchant's EUR payment on its Adyen
connector account, with a card the shopper saved at Adyen; the rest are USD through Stripe.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from devtools.demo.customer import AUTHENTICATE
from devtools.demo.customer import METADATA_KEY as CUSTOMER_METADATA_KEY

SUCCESS_METHODS = ("pm_card_visa", "pm_card_mastercard", "pm_card_amex")
DECLINE_METHODS = ("pm_card_chargeDeclined", "pm_card_chargeDeclinedInsufficientFunds")
# A card whose issuer asks for 3-D Secure: the demo's "customer" authenticates some and
# abandons the others (canceled / authentication_timeout after ACTION_TIMEOUT_SECONDS).
THREE_DS_METHOD = "pm_card_threeDSecure2Required"
# Every seventh payment asks for 3-D Secure.
THREE_DS_EVERY = 7
RETURN_URL = "https://shop.example/checkout/complete"
# Every fourth payment (when not a 3-D Secure one) is an EUR payment through Adyen.
ADYEN_EVERY = 4
# A card the shopper stored at Adyen (sent as storedPaymentMethodId, with the customer as
# shopperReference); the simulator authorises it.
ADYEN_STORED_METHOD = "8415718415172200"
STRIPE = "stripe"
ADYEN = "adyen"
FINAL = frozenset({"succeeded", "failed", "canceled"})
MAX_SEND_RETRIES = 6
# Polling faster than the server's Retry-After would only load the API; slower would
# make the demo sit idle.
MAX_POLL_INTERVAL_SECONDS = 1.0


@dataclass(frozen=True)
class LogicalPayment:
    key: str
    amount: int
    payment_method: str
    sends: int
    concurrent: bool
    # 3-D Secure: "authenticate" (the customer completes it) or "abandon"; None: no 3DS.
    three_ds: str | None = None
    # "stripe" (USD, the platform's Stripe account) or "adyen" (EUR, a connector account).
    provider: str = STRIPE

    @property
    def expect_decline(self) -> bool:
        return self.payment_method in DECLINE_METHODS

    @property
    def currency(self) -> str:
        return "eur" if self.provider == ADYEN else "usd"

    def body(self, connector_account: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "amount": self.amount,
            "currency": self.currency,
            "payment_method": self.payment_method,
            "customer_reference": f"customer-{self.amount % 97}",
            "metadata": {"order": self.key},
        }
        if self.provider == ADYEN:
            # Adyen needs the shopper's reference for a stored card, and a return URL.
            body.update(customer=f"cus_demo{self.amount % 97}", return_url=RETURN_URL)
            if connector_account is not None:
                body["connector_account"] = connector_account
        if self.three_ds == AUTHENTICATE:
            # The demo's customer (devtools/demo/customer.py) completes this one's challenge.
            body["metadata"][CUSTOMER_METADATA_KEY] = AUTHENTICATE
        if self.three_ds is not None:
            body.update(off_session=False, return_url=RETURN_URL)
        return body


def plan_payments(count: int, *, seed: int, decline_rate: float) -> list[LogicalPayment]:
    rng = random.Random(seed)
    run_tag = f"{seed:x}-{rng.getrandbits(32):08x}"
    plan = []
    for index in range(count):
        declined = rng.random() < decline_rate
        methods = DECLINE_METHODS if declined else SUCCESS_METHODS
        three_ds = None
        if index % THREE_DS_EVERY == THREE_DS_EVERY // 2:
            # Alternately authenticated and abandoned, so even a short run shows both.
            three_ds = AUTHENTICATE if (index // THREE_DS_EVERY) % 2 == 0 else "abandon"
            declined = False
            methods = SUCCESS_METHODS
        provider = ADYEN if index % ADYEN_EVERY == 1 and three_ds is None else STRIPE
        amount = rng.randrange(100, 50_000)
        method = THREE_DS_METHOD if three_ds else rng.choice(methods)
        plan.append(
            LogicalPayment(
                key=f"demo-{run_tag}-{index:05d}",
                amount=amount,
                payment_method=ADYEN_STORED_METHOD if provider == ADYEN else method,
                sends=rng.choice((1, 1, 2, 2, 3, 4)),
                concurrent=rng.random() < 0.5,
                three_ds=three_ds,
                provider=provider,
            )
        )
    return plan


@dataclass
class StormStats:
    posts: int = 0
    accepted: int = 0  # answers without Idempotent-Replayed (a new record)
    replays: int = 0  # answers with Idempotent-Replayed: true
    retried_sends: int = 0  # sends repeated after a 5xx or a broken connection
    server_errors: int = 0
    unexpected: list[str] = field(default_factory=list)
    ids_by_key: dict[str, set[str]] = field(default_factory=dict)
    final_by_id: dict[str, dict[str, Any]] = field(default_factory=dict)


class Storm:
    def __init__(
        self,
        api_url: str,
        api_key: str,
        *,
        seed: int,
        adyen_key: str | None = None,
        adyen_account: str | None = None,
        concurrency: int = 48,
        poll_timeout: float = 180.0,
        on_final: Callable[[LogicalPayment, dict[str, Any]], None] | None = None,
    ) -> None:
        self._api_url = api_url
        self._api_key = api_key
        # The EUR merchant's key and its Adyen account (the ``adyen`` payments).
        self._adyen_key = adyen_key
        self._adyen_account = adyen_account
        self._rng = random.Random(seed + 1)
        self._concurrency = concurrency
        self._poll_timeout = poll_timeout
        self._on_final = on_final or (lambda _payment, _final: None)
        self.stats = StormStats()

    async def run(self, plan: list[LogicalPayment]) -> StormStats:
        limits = httpx.Limits(max_connections=self._concurrency * 4)
        async with httpx.AsyncClient(
            base_url=self._api_url,
            headers={"Authorization": f"Bearer {self._api_key}"},
            timeout=httpx.Timeout(30.0),
            limits=limits,
            trust_env=False,
        ) as client:
            gate = asyncio.Semaphore(self._concurrency)
            await asyncio.gather(*(self._one(client, gate, payment) for payment in plan))
        return self.stats

    async def _one(
        self, client: httpx.AsyncClient, gate: asyncio.Semaphore, payment: LogicalPayment
    ) -> None:
        async with gate:
            if payment.concurrent:
                answers = await asyncio.gather(
                    *(self._send(client, payment) for _ in range(payment.sends))
                )
            else:
                answers = []
                for _ in range(payment.sends):
                    answers.append(await self._send(client, payment))
                    await asyncio.sleep(self._rng.uniform(0, 0.05))
        ids = {answer["id"] for answer in answers if answer is not None}
        self.stats.ids_by_key.setdefault(payment.key, set()).update(ids)
        if len(ids) != 1:
            self.stats.unexpected.append(f"{payment.key}: answers named {sorted(ids)}")
            return
        final = await self._poll(client, ids.pop(), payment)
        if final is not None:
            self.stats.final_by_id[final["id"]] = final
            self._on_final(payment, final)

    def _auth(self, payment: LogicalPayment) -> dict[str, str]:
        """The merchant's key: an ``adyen`` payment is the EUR merchant's."""
        if payment.provider == ADYEN:
            if self._adyen_key is None:
                raise ValueError("an Adyen payment in the plan, but no Adyen merchant key")
            return {"Authorization": f"Bearer {self._adyen_key}"}
        return {"Authorization": f"Bearer {self._api_key}"}

    async def _send(
        self, client: httpx.AsyncClient, payment: LogicalPayment
    ) -> dict[str, Any] | None:
        body = payment.body(self._adyen_account)
        headers = {**self._auth(payment), "Idempotency-Key": payment.key}
        for attempt in range(MAX_SEND_RETRIES):
            self.stats.posts += 1
            try:
                response = await client.post("/v1/payments", json=body, headers=headers)
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code < 500:
                if response.status_code not in (200, 202):
                    self.stats.unexpected.append(
                        f"{payment.key}: {response.status_code} {response.text[:200]}"
                    )
                    return None
                if response.headers.get("Idempotent-Replayed") == "true":
                    self.stats.replays += 1
                else:
                    self.stats.accepted += 1
                answer: dict[str, Any] = response.json()
                return answer
            if response is not None:
                self.stats.server_errors += 1
            self.stats.retried_sends += 1
            await asyncio.sleep(self._rng.uniform(0, 0.1 * 2**attempt))
        self.stats.unexpected.append(f"{payment.key}: gave up after {MAX_SEND_RETRIES} sends")
        return None

    async def _poll(
        self, client: httpx.AsyncClient, payment_id: str, payment: LogicalPayment
    ) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._poll_timeout
        while loop.time() < deadline:
            try:
                response = await client.get(
                    f"/v1/payments/{payment_id}", headers=self._auth(payment)
                )
            except httpx.TransportError:
                await asyncio.sleep(0.5)
                continue
            if response.status_code == 200:
                body: dict[str, Any] = response.json()
                if body["status"] in FINAL:
                    return body
                wait = float(response.headers.get("Retry-After", "1"))
                await asyncio.sleep(min(wait, MAX_POLL_INTERVAL_SECONDS))
            else:
                await asyncio.sleep(0.5)
        return None
