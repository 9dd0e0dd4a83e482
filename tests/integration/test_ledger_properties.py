"""The ledger is double-entry, and stays so whatever happens to a payment (decision 0101).

A Hypothesis property over random histories, run through the real services and the engine on
SQLite and PostgreSQL (the fake provider, no broker): charges (automatic or manual capture,
in two currencies, some declined), partial and full captures, cancels, refunds of ours,
refunds made at the provider and learnt only from its event or from an operator's sync, and
disputes.  A request the services refuse (a capture of a captured payment, a refund of more
than is left) is part of the history too: it must change nothing.

After every step:

- the trial balance: every currency's lines sum to zero (``ledger_sums``, what each
  reconciliation run reads), and every payment's lines per currency;
- each payment's ``amount_captured`` / ``amount_refunded`` are what its ledger booked to
  the provider's receivable, and what the provider says it received and refunded;
- an authorisation's lines are open while it is uncaptured, released once it is not.

Bounded and deterministic: ``MAX_EXAMPLES`` histories of at most ``MAX_STEPS`` steps each,
derandomized, no example database.  The database is shared by the examples of one run
(each example's payments are its own), so the trial balance covers every earlier history
too.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines
from orchestrator.domain.model import ApiClient, Role
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.takeover import Actor
from orchestrator.ops.refund_sync import sync_payment_refunds
from orchestrator.providers.base import DisputeFacts, ProviderEvent, ProviderRefund
from orchestrator.services.api_keys import create_client
from orchestrator.services.captures import (
    CaptureExceedsCapturable,
    PaymentStatusConflict,
    accept_cancel,
    accept_capture,
)
from orchestrator.services.provider_events import store_event
from orchestrator.services.refunds import PaymentNotRefundable, RefundExceedsCaptured
from tests.fakes.provider import FakeProvider
from tests.harness.captures import cancel_fingerprint, capture_fingerprint
from tests.harness.containers import build_container
from tests.harness.refunds import request_refund
from tests.harness.seeds import accept, new_merchant, reload

MAX_EXAMPLES = 60
MAX_STEPS = 8
CURRENCIES = ("usd", "eur")
DECLINED_CARD = "pm_card_chargeDeclined"

_ids = itertools.count(1)


# -- the steps -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Charge:
    amount: int
    currency: str
    manual: bool
    declined: bool


@dataclass(frozen=True)
class Capture:
    which: int  # the payment, counted back from the newest
    percent: int | None  # None: the whole authorisation


@dataclass(frozen=True)
class Cancel:
    which: int


@dataclass(frozen=True)
class Refund:
    which: int
    percent: int | None  # None: all that is left


@dataclass(frozen=True)
class ProviderSideRefund:
    """A refund made in the provider's dashboard, learnt by payorch from the provider's
    ``charge.refunded`` event or from an operator's sync (what a reconciliation finding of
    an unannounced refund tells the operator to run)."""

    which: int
    percent: int
    via: str  # event, operator


@dataclass(frozen=True)
class Dispute:
    which: int


Step = Charge | Capture | Cancel | Refund | ProviderSideRefund | Dispute

_which = st.integers(min_value=0, max_value=3)
_percent = st.integers(min_value=1, max_value=100)
charges = st.builds(
    Charge,
    amount=st.integers(min_value=1, max_value=50_000),
    currency=st.sampled_from(CURRENCIES),
    manual=st.booleans(),
    # One in five at most (Hypothesis leans towards the low end: 0 is an accepted card).
    declined=st.integers(min_value=0, max_value=4).map(lambda n: n == 4),
)
_captures = st.builds(Capture, which=_which, percent=st.none() | _percent)
_refunds = st.builds(Refund, which=_which, percent=st.none() | _percent)
_provider_refunds = st.builds(
    ProviderSideRefund, which=_which, percent=_percent, via=st.sampled_from(("event", "operator"))
)
# Branches drawn alike: the money-moving ones are listed twice, so that most histories
# capture and refund (a cancel or a dispute ends little).
steps: st.SearchStrategy[Step] = st.one_of(
    charges,
    _captures,
    _captures,
    st.builds(Cancel, which=_which),
    _refunds,
    _refunds,
    _provider_refunds,
    _provider_refunds,
    st.builds(Dispute, which=_which),
)
histories = st.tuples(charges, st.lists(steps, min_size=3, max_size=MAX_STEPS - 1)).map(
    lambda t: [t[0], *t[1]]
)


# -- running a step through the real code ----------------------------------------------------


@dataclass
class World:
    container: Container
    provider: FakeProvider
    operator: Actor
    merchant: ApiClient | None = None
    payments: list[str] = field(default_factory=list)

    def run_operation(self, operation_id: str, token: int) -> str:
        """Run the operation to its end; its final status."""
        process_operation(
            self.container.runner(),
            operation_id,
            token,
            owner="property",
            sleep=lambda _s: None,
            rng=random.Random(7),
        )
        with self.container.uow(read_only=True) as uow:
            done = uow.operations.get(operation_id)
        assert done is not None
        return done.status.value

    def pick(self, which: int) -> str:
        """Counted back from the newest payment (Hypothesis leans towards 0: the newest)."""
        return self.payments[-1 - which % len(self.payments)]

    def apply(self, step: Step) -> None:
        """Run one step; a refusal of the services is an outcome like any other (each
        outcome is counted: ``--hypothesis-show-statistics`` shows what the runs covered)."""
        if isinstance(step, Charge):
            outcome = self.charge(step)
        elif isinstance(step, Capture):
            outcome = self.capture(step)
        elif isinstance(step, Cancel):
            outcome = self.cancel(step)
        elif isinstance(step, Refund):
            outcome = self.refund(step)
        elif isinstance(step, ProviderSideRefund):
            outcome = self.provider_refund(step)
        else:
            outcome = self.dispute(step)
        event(f"{type(step).__name__}: {outcome}")

    def charge(self, step: Charge) -> str:
        assert self.merchant is not None
        record = accept(
            self.container,
            self.merchant,
            f"charge-{next(_ids)}",
            amount=step.amount,
            currency=step.currency,
            payment_method=DECLINED_CARD if step.declined else "pm_card_visa",
            capture_method="manual" if step.manual else "automatic",
        )
        process_payment(self.container.runner(), record.id, record.lease_token, sleep=lambda _s: 0)
        self.payments.append(record.id)
        return reload(self.container, record.id).status.value

    def capture(self, step: Capture) -> str:
        assert self.merchant is not None
        payment = reload(self.container, self.pick(step.which))
        amount = None if step.percent is None else _part(payment.request.amount, step.percent)
        try:
            accepted = accept_capture(
                self.container.uow,
                self.container.publisher,
                self.container.settings,
                self.merchant,
                payment.id,
                f"capture-{next(_ids)}",
                amount,
                capture_fingerprint(payment.id, amount),
            )
        except (PaymentStatusConflict, CaptureExceedsCapturable):
            return "refused"
        return self.run_operation(accepted.record.id, accepted.record.lease_token)

    def cancel(self, step: Cancel) -> str:
        assert self.merchant is not None
        payment_id = self.pick(step.which)
        try:
            accepted = accept_cancel(
                self.container.uow,
                self.container.publisher,
                self.container.settings,
                self.merchant,
                payment_id,
                f"cancel-{next(_ids)}",
                None,
                cancel_fingerprint(payment_id, None),
            )
        except PaymentStatusConflict:
            return "refused"
        return self.run_operation(accepted.record.id, accepted.record.lease_token)

    def refund(self, step: Refund) -> str:
        assert self.merchant is not None
        payment = reload(self.container, self.pick(step.which))
        left = payment.amount_captured - payment.amount_refund_reserved
        amount = None if step.percent is None else _part(max(left, 1), step.percent)
        try:
            accepted = request_refund(
                self.container, self.merchant, payment.id, f"refund-{next(_ids)}", amount=amount
            )
        except (PaymentNotRefundable, RefundExceedsCaptured):
            return "refused"
        return self.run_operation(accepted.record.id, accepted.record.lease_token)

    def provider_refund(self, step: ProviderSideRefund) -> str:
        payment = reload(self.container, self.pick(step.which))
        provider_payment_id = payment.provider_payment_id
        if provider_payment_id is None:
            return "skipped"
        intent = self.provider.provider_payments[provider_payment_id]
        left = intent.amount_received - self.provider.refunded(provider_payment_id)
        if intent.status != "succeeded" or left <= 0:
            return "skipped"  # a dashboard refunds only what was received and is left
        refund = ProviderRefund(
            id=f"re_dashboard{next(_ids)}",
            provider_payment_id=provider_payment_id,
            amount=_part(left, step.percent),
            currency=intent.currency,
            status="succeeded",
            metadata={},
            reason="requested_by_customer",
            created=1_700_000_000 + next(_ids),
        )
        self.provider.refunds[refund.id] = refund
        if step.via == "event":
            received = store_event(
                _event("charge.refunded", provider_payment_id, object_type="charge"),
                uow=self.container.uow,
                provider="stripe",
            )
            assert received.payment_id == payment.id
            with self.container.uow(read_only=True) as uow:
                sync = uow.operations.unclaimed_sync(payment.id)
        else:
            sync = sync_payment_refunds(
                self.container.uow, self.operator, payment.id, reason="reconciliation finding"
            ).sync
        assert sync is not None, "the provider's refund queued no sync"
        return f"{step.via} {self.run_operation(sync.id, sync.lease_token)}"

    def dispute(self, step: Dispute) -> str:
        payment = reload(self.container, self.pick(step.which))
        if payment.provider_payment_id is None:
            return "skipped"
        facts = DisputeFacts(
            amount=payment.amount_captured or payment.request.amount,
            currency=payment.request.currency,
            reason="fraudulent",
            status="needs_response",
        )
        received = store_event(
            _event("charge.dispute.created", payment.provider_payment_id, dispute=facts),
            uow=self.container.uow,
            provider="stripe",
        )
        assert received.payment_id == payment.id
        return "recorded"


def _part(amount: int, percent: int) -> int:
    return max(1, amount * percent // 100)


def _event(
    event_type: str,
    provider_payment_id: str,
    *,
    object_type: str = "dispute",
    dispute: DisputeFacts | None = None,
) -> ProviderEvent:
    n = next(_ids)
    object_id = f"dp_property{n}" if dispute else f"ch_property{n}"
    return ProviderEvent(
        id=f"evt_property{n}",
        type=event_type,
        created=1_700_000_000 + n,
        object_id=object_id,
        object_type=object_type,
        provider_payment_id=provider_payment_id,
        raw={"id": f"evt_property{n}", "type": event_type},
        dispute=dispute,
    )


# -- what must hold after every step ---------------------------------------------------------


def assert_the_books_hold(world: World) -> None:
    container, provider = world.container, world.provider
    with container.uow(read_only=True) as uow:
        # The trial balance, as every reconciliation run reads it.
        sums = uow.reconciliation.ledger_sums()
        total = sa.func.sum(ledger_lines.c.amount)
        per_payment = uow.session.all(
            sa.select(ledger_lines.c.payment_id, ledger_lines.c.currency, total.label("total"))
            .group_by(ledger_lines.c.payment_id, ledger_lines.c.currency)
            .having(total != 0)
        )
        payments = {pid: uow.payments.get(pid) for pid in world.payments}
        lines = {pid: uow.history.ledger_lines(pid) for pid in world.payments}
    assert all(total == 0 for total in sums.values()), sums
    assert per_payment == [], per_payment

    for payment_id, payment in payments.items():
        assert payment is not None
        booked = lines[payment_id]
        assert {line.currency for line in booked} <= {payment.request.currency}
        # The provider side books at the account the money moved at (decision 0105).
        at = payment.connector_account_id or "ca_platform_stripe"
        provider_side = {line.account for line in booked if line.account.startswith("provider_")}
        assert provider_side <= {f"provider_receivable:{at}", f"provider_authorized:{at}"}, booked
        receivable = [line.amount for line in booked if line.account.startswith("provider_rec")]
        authorized = sum(line.amount for line in booked if line.account.startswith("provider_auth"))
        captured = sum(amount for amount in receivable if amount > 0)
        refunded = -sum(amount for amount in receivable if amount < 0)
        assert (payment.amount_captured, payment.amount_refunded) == (captured, refunded), (
            payment,
            booked,
        )
        assert payment.amount_refunded <= payment.amount_captured
        open_authorisation = payment.status is PaymentStatus.REQUIRES_CAPTURE
        assert authorized == (payment.request.amount if open_authorisation else 0), booked
        # The provider's word: what it received and what it refunded.
        if payment.provider_payment_id is not None:
            intent = provider.provider_payments[payment.provider_payment_id]
            received = intent.amount_received if intent.status == "succeeded" else 0
            assert payment.amount_captured == received
            assert payment.amount_refunded == provider.refunded(payment.provider_payment_id)


# -- the property ----------------------------------------------------------------------------


@dataclass(repr=False)
class Shared:
    container: Container
    provider: FakeProvider
    operator: Actor

    def __repr__(self) -> str:
        # Hypothesis prints the arguments of a falsifying example: not the provider's state.
        return "Shared(...)"


@pytest.fixture
def shared(database_url: str) -> Iterator[Shared]:
    provider = FakeProvider()
    container = build_container(database_url, provider=provider, max_attempts=3)
    ops = create_client(container.uow, "ops", Role.OPS).client
    try:
        yield Shared(container, provider, Actor.operator(ops.id, ops.name))
    finally:
        container.close()


@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    # One database for the examples of a run, on purpose (each example adds its own payments).
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories)
# Whole stories, run first whatever is drawn: a partial capture refunded by us and then at the
# provider (its event, then an operator's sync) down to nothing, so that our last refund is
# refused, with a dispute on top; a cancel and everything a canceled payment must refuse;
# payments in two currencies side by side, one declined.
@example(
    history=[
        Charge(amount=10_000, currency="usd", manual=True, declined=False),
        Capture(which=0, percent=60),
        Refund(which=0, percent=25),
        ProviderSideRefund(which=0, percent=50, via="event"),
        ProviderSideRefund(which=0, percent=100, via="operator"),
        Refund(which=0, percent=None),
        Dispute(which=0),
    ]
)
@example(
    history=[
        Charge(amount=2_500, currency="eur", manual=True, declined=False),
        Cancel(which=0),
        Capture(which=0, percent=None),
        Refund(which=0, percent=None),
        ProviderSideRefund(which=0, percent=100, via="event"),
    ]
)
@example(
    history=[
        Charge(amount=1_999, currency="usd", manual=False, declined=False),
        Charge(amount=7_000, currency="eur", manual=True, declined=False),
        Charge(amount=300, currency="eur", manual=False, declined=True),
        Capture(which=1, percent=None),
        Refund(which=2, percent=None),  # the oldest: the usd payment, in full
        ProviderSideRefund(which=1, percent=40, via="operator"),  # the captured eur one
        Refund(which=0, percent=None),  # the newest: declined, refused
    ]
)
def test_every_history_keeps_the_ledger_balanced_and_the_payments_in_agreement(
    shared: Shared, history: list[Step]
) -> None:
    world = World(shared.container, shared.provider, shared.operator)
    world.merchant = new_merchant(shared.container, f"merchant-{next(_ids)}")
    for step in history:
        world.apply(step)
        assert_the_books_hold(world)
