"""The charge's lease, on the payment row: the generic lease writes (``lease_columns``)
plus the charge's own steps, each a compare-and-set on the lease token."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.repositories.lease_columns import LeaseColumns, param
from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.tables import payments
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.representation import encode_representation
from orchestrator.domain.states import (
    Event,
    Outcome,
    PaymentStatus,
    RecoveryPoint,
    WaitingFor,
    allowed_sources,
)

c = payments.c


def _guard(event: Event) -> sa.ColumnElement[bool]:
    """The state machine's source states for ``event``, as SQL."""
    status, points = allowed_sources(event)
    # ``=`` joined by OR, not ``IN (…)``: an IN list of literals is an expanding parameter,
    # rendered per execution, which a prebuilt statement cannot be (``db.prebuilt``).
    point = sa.or_(*(c.recovery_point == p.value for p in points))
    return sa.and_(c.status == status.value, point)


class LeaseRepository(LeaseColumns[PaymentRecord]):
    table = payments

    def _to_record(self, row: Any) -> PaymentRecord:
        return to_payment(row)

    def _history_ids(self, record: PaymentRecord) -> dict[str, str | None]:
        return {"payment_id": record.id}

    def _history_id_columns(self, updated: sa.CTE) -> dict[str, sa.ColumnElement[Any]]:
        return {"payment_id": updated.c.id, "operation_id": sa.null()}

    def _parkable(self) -> sa.ColumnElement[bool]:
        return _guard(Event.PARKED)

    def _retryable(self) -> sa.ColumnElement[bool]:
        return _guard(Event.RETRIED)

    def _claim_values(self, now: sa.ColumnElement[datetime]) -> dict[str, Any]:
        # A wake-up that arrives from now on, while we hold the lease, is kept in woken_at
        # so that our own wait (``wait``) ends at once instead of at the re-check.
        # A claim of a payment whose next step is a create (accepted, no lookup owed) also
        # stamps the create attempt, as ``renew_for_create`` would: the claim is then the
        # write committed before that create, and the run's first create needs no
        # transaction of its own (``engine.kinds.charge``).  A run that ends before
        # sending it (parked, deferred) only widened the lookup's window: safe.
        creating = sa.and_(
            c.recovery_point == RecoveryPoint.ACCEPTED.value, c.lookup_pending.is_(False)
        )
        return {
            "woken_at": None,
            "first_create_at": sa.case(
                (creating, sa.func.coalesce(c.first_create_at, now)), else_=c.first_create_at
            ),
            "last_create_at": sa.case((creating, now), else_=c.last_create_at),
        }

    @staticmethod
    def claim_stamped_create(record: PaymentRecord) -> bool:
        """Whether the claim that returned ``record`` stamped a create attempt (above)."""
        return record.recovery_point is RecoveryPoint.ACCEPTED and not record.lookup_pending

    def renew(
        self,
        record_id: str,
        *,
        token: int,
        now: datetime,
        lease_until: datetime,
        next_confirm: bool = False,
    ) -> PaymentRecord | None:
        """Extend our lease before a provider call.  With ``next_confirm`` it also takes the
        next confirm number, so the key ``…-confirm-{n}`` is durable before it is sent."""
        if not next_confirm:
            return super().renew(record_id, token=token, now=now, lease_until=lease_until)
        return self._update_one(
            None,
            self._held(record_id, token),
            locked_until=lease_until,
            confirm_attempts=c.confirm_attempts + 1,
        )

    def renew_for_create(
        self, payment_id: str, *, token: int, now: datetime, lease_until: datetime
    ) -> PaymentRecord | None:
        """Renew before a create and stamp the attempt (database clock): the first and the
        latest create bound the window in which the provider can have created our intent."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            locked_until=lease_until,
            first_create_at=sa.func.coalesce(c.first_create_at, now),
            last_create_at=now,
            updated_at=now,
        )

    def save_lookup_progress(
        self,
        payment_id: str,
        *,
        token: int,
        now: datetime,
        lease_until: datetime,
        cursor: str | None,
        pages: int,
        rejected: list[dict[str, Any]],
    ) -> PaymentRecord | None:
        """Renew while paging and store where the scan resumes (and what it rejected), so an
        interrupted lookup (kill, time limit, takeover) continues instead of starting over."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            locked_until=lease_until,
            lookup_cursor=cursor,
            lookup_pages=pages,
            rejected_intents=rejected or None,
            updated_at=now,
        )

    def record_rejected(
        self, payment_id: str, *, token: int, rejected: list[dict[str, Any]], now: datetime
    ) -> PaymentRecord | None:
        """Keep the intents that named this record but did not match it (never confirmed)."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            rejected_intents=rejected or None,
            updated_at=now,
        )

    def end_lookup(self, payment_id: str, *, token: int, now: datetime) -> PaymentRecord | None:
        """The scan read its whole window: nothing owed until the next unknown create."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            lookup_pending=False,
            lookup_cursor=None,
            lookup_pages=0,
            updated_at=now,
        )

    def mark_intent_created(
        self,
        payment_id: str,
        *,
        token: int,
        provider_payment_id: str,
        now: datetime,
        confirm_until: datetime | None = None,
    ) -> PaymentRecord | None:
        """Store the intent (``intent_created``).  With ``confirm_until`` the same statement
        is also the confirm's renewal (``renew(next_confirm=True)``): the lease moves to
        ``confirm_until`` and the next confirm number is taken, durable before it is sent."""
        confirm = confirm_until is not None

        def build() -> tuple[sa.ColumnElement[bool], dict[str, Any]]:
            where = sa.and_(
                c.id == param("id", c.id),
                c.lease_token == param("token", c.lease_token),
                _guard(Event.INTENT_CREATED),
            )
            values: dict[str, Any] = {
                "provider_payment_id": param("intent", c.provider_payment_id),
                "recovery_point": RecoveryPoint.INTENT_CREATED.value,
                "lookup_pending": False,
                "lookup_cursor": None,
                "lookup_pages": 0,
                "updated_at": param("now", c.updated_at),
            }
            if confirm:
                values["locked_until"] = param("until", c.locked_until)
                values["confirm_attempts"] = c.confirm_attempts + 1
            return where, values

        return self._update_prebuilt(
            None,
            self._prebuilt("intent_created+confirm" if confirm else "intent_created", build),
            {
                "p_id": payment_id,
                "p_token": token,
                "p_intent": provider_payment_id,
                "p_now": now,
                "p_until": confirm_until,
            },
        )

    def record_unknown_outcome(
        self,
        payment_id: str,
        *,
        token: int,
        error: str,
        now: datetime,
        owe_lookup: bool = False,
    ) -> PaymentRecord | None:
        """Count an unknown outcome.  ``owe_lookup`` (a create): a fresh scan of the window
        is owed before anything else, from the top (the window may have grown)."""
        values: dict[str, Any] = {}
        if owe_lookup:
            values = {"lookup_pending": True, "lookup_cursor": None, "lookup_pages": 0}
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            unknown_outcomes=c.unknown_outcomes + 1,
            last_error=error[:2000],
            updated_at=now,
            **values,
        )

    def record_settlement(
        self,
        payment_id: str,
        *,
        token: int,
        outcome: Outcome,
        provider_payment_id: str | None,
        provider_charge_id: str | None,
        failure: Failure | None,
        now: datetime,
        settled_amount: int | None = None,
        settled_currency: str | None = None,
    ) -> PaymentRecord | None:
        """Store what the provider settled (recovery point ``provider_settled``), so a worker
        that dies before finishing leaves a record that needs no further provider call."""

        def build() -> tuple[sa.ColumnElement[bool], dict[str, Any]]:
            where = sa.and_(
                c.id == param("id", c.id),
                c.lease_token == param("token", c.lease_token),
                _guard(Event.PROVIDER_SETTLED),
            )
            values = {
                "recovery_point": RecoveryPoint.PROVIDER_SETTLED.value,
                "provider_outcome": param("outcome", c.provider_outcome),
                "provider_payment_id": sa.func.coalesce(
                    param("intent", c.provider_payment_id), c.provider_payment_id
                ),
                "provider_charge_id": param("charge", c.provider_charge_id),
                "failure_code": param("failure_code", c.failure_code),
                "decline_code": param("decline_code", c.decline_code),
                "failure_message": param("failure_message", c.failure_message),
                "settled_amount": param("settled_amount", c.settled_amount),
                "settled_currency": param("settled_currency", c.settled_currency),
                # The wait, if any, is over.
                "waiting_for": None,
                "waiting_since": None,
                "next_action": None,
                "client_secret": None,
                "updated_at": param("now", c.updated_at),
            }
            return where, values

        return self._update_prebuilt(
            None,
            self._prebuilt("settlement", build),
            {
                "p_id": payment_id,
                "p_token": token,
                "p_outcome": outcome.value,
                "p_intent": provider_payment_id,
                "p_charge": provider_charge_id,
                "p_failure_code": failure.code if failure else None,
                "p_decline_code": failure.decline_code if failure else None,
                "p_failure_message": failure.message[:1000] if failure else None,
                "p_settled_amount": settled_amount,
                "p_settled_currency": settled_currency,
                "p_now": now,
            },
        )

    def finish(
        self,
        payment_id: str,
        *,
        token: int,
        status: PaymentStatus,
        response_body: dict[str, Any],
        now: datetime,
        amount_captured: int = 0,
        amount_capturable: int = 0,
        event_sequence: int | None = None,
    ) -> PaymentRecord | None:
        """COMPLETED, fenced, with what a success captured (or, under manual capture, what
        was authorised for a capture to take; ``completed_at`` then waits for it).  None: we
        were fenced out and the caller must roll back.

        ``event_sequence``: the number of the event the finish writes, when the caller took
        it from the row under the lock this transaction holds (``engine.kinds.charge.finish``);
        the row's ``latest_event_sequence`` becomes it.  None: left as it is.

        The final answer is stored twice: as the document (JSONB, for SQL) and as the exact
        text every replay and GET serves (``final_response``), since JSONB reorders keys."""

        def build() -> tuple[sa.ColumnElement[bool], dict[str, Any]]:
            at = param("now", c.updated_at)
            where = sa.and_(
                c.id == param("id", c.id),
                c.lease_token == param("token", c.lease_token),
                _guard(Event.FINISHED),
            )
            values = {
                "status": param("status", c.status),
                "recovery_point": RecoveryPoint.COMPLETED.value,
                "response_body": param("body", c.response_body),
                "final_response": param("final", c.final_response),
                "amount_captured": param("captured", c.amount_captured),
                "amount_capturable": param("capturable", c.amount_capturable),
                "lease_owner": None,
                "locked_until": None,
                "next_attempt_at": None,
                "waiting_for": None,
                "waiting_since": None,
                "next_action": None,
                "client_secret": None,
                "completed_at": param("completed", c.completed_at),
                "updated_at": at,
                "latest_event_sequence": sa.func.coalesce(
                    param("sequence", c.latest_event_sequence), c.latest_event_sequence
                ),
            }
            return where, values

        return self._update_prebuilt(
            "finish",
            self._prebuilt("finish", build),
            {
                "p_id": payment_id,
                "p_token": token,
                "p_status": status.value,
                "p_body": response_body,
                "p_final": encode_representation(response_body).decode("utf-8"),
                "p_captured": amount_captured,
                "p_capturable": amount_capturable,
                "p_completed": None if status is PaymentStatus.REQUIRES_CAPTURE else now,
                "p_now": now,
                "p_sequence": event_sequence,
            },
        )

    def record_action_required(
        self,
        payment_id: str,
        *,
        token: int,
        next_action: dict[str, Any] | None,
        client_secret: str | None,
        now: datetime,
    ) -> PaymentRecord | None:
        """The provider asks the customer to authenticate: the payment shows
        ``requires_action`` with what the customer must do.  ``waiting_since`` is kept if
        the wait had already begun (the timeout counts from the first ask)."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            waiting_for=WaitingFor.CUSTOMER.value,
            waiting_since=sa.func.coalesce(
                sa.case((c.waiting_for == WaitingFor.CUSTOMER.value, c.waiting_since), else_=None),
                now,
            ),
            next_action=next_action,
            client_secret=client_secret,
            updated_at=now,
        )

    def wait(
        self,
        payment_id: str,
        *,
        token: int,
        until: datetime,
        waiting_for: WaitingFor,
        now: datetime,
    ) -> PaymentRecord | None:
        """Release the lease as a wait: no holder, re-checked at ``until``.  The claim that
        found out is not a failed attempt (only unknown outcomes count towards
        MAX_ATTEMPTS), so its count is given back.  A wake-up that came while we held the
        lease (``woken_at``) makes the record due at once."""
        due = sa.case((c.woken_at.is_not(None), now), else_=until)
        return self._update_one(
            "wait",
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            lease_owner=None,
            locked_until=due,
            next_attempt_at=due,
            attempts=sa.case((c.attempts > 0, c.attempts - 1), else_=0),
            waiting_for=waiting_for.value,
            waiting_since=sa.case(
                (c.waiting_for == waiting_for.value, sa.func.coalesce(c.waiting_since, now)),
                else_=now,
            ),
            woken_at=None,
        )
