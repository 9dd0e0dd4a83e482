"""The charge's lease, on the payment row: the generic lease writes
(``lease_repository_base``, their SQL in ``lease_statements``) plus the charge's own steps,
each a compare-and-set on the lease token."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.repositories import lease_statements as statements
from orchestrator.db.repositories.lease_repository_base import LeaseRepositoryBase
from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.tables import payments
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.states import (
    Event,
    Outcome,
    PaymentStatus,
    RecoveryPoint,
    WaitingFor,
)

c = payments.c


class LeaseRepository(LeaseRepositoryBase[PaymentRecord]):
    table = payments

    def _to_record(self, row: Any) -> PaymentRecord:
        return to_payment(row)

    def _history_ids(self, record: PaymentRecord) -> dict[str, str | None]:
        return {"payment_id": record.id}

    def _history_id_columns(self, updated: sa.CTE) -> dict[str, sa.ColumnElement[Any]]:
        return {"payment_id": updated.c.id, "operation_id": sa.null()}

    def _parkable(self) -> sa.ColumnElement[bool]:
        return statements.payment_guard(Event.PARKED)

    def _retryable(self) -> sa.ColumnElement[bool]:
        return statements.payment_guard(Event.RETRIED)

    def _claim_values(self, now: sa.ColumnElement[datetime]) -> dict[str, Any]:
        return statements.payment_claim_sets(now)

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
            self._held(payment_id, token),
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
            self._held(payment_id, token),
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
            self._held(payment_id, token),
            rejected_intents=rejected or None,
            updated_at=now,
        )

    def end_lookup(self, payment_id: str, *, token: int, now: datetime) -> PaymentRecord | None:
        """The scan read its whole window: nothing owed until the next unknown create."""
        return self._update_one(
            None,
            self._held(payment_id, token),
            lookup_pending=False,
            lookup_cursor=None,
            lookup_pages=0,
            updated_at=now,
        )

    def mark_provider_payment_created(
        self,
        payment_id: str,
        *,
        token: int,
        provider_payment_id: str,
        now: datetime,
        confirm_until: datetime | None = None,
    ) -> PaymentRecord | None:
        """Store the provider payment (``intent_created``).  With ``confirm_until`` the same
        statement is also the confirm's renewal (``renew(next_confirm=True)``): the lease moves
        to ``confirm_until`` and the next confirm number is taken, durable before it is sent."""
        confirm = confirm_until is not None
        return self._update_prebuilt(
            None,
            self._prebuilt(
                "intent_created+confirm" if confirm else "intent_created",
                lambda: statements.intent_created(confirm=confirm),
            ),
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
            self._held(payment_id, token),
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
        return self._update_prebuilt(
            None,
            self._prebuilt("settlement", statements.settlement),
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
        return self._update_prebuilt(
            "finish",
            self._prebuilt("finish", statements.payment_finish),
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
            self._held(payment_id, token),
            waiting_for=WaitingFor.CUSTOMER.value,
            waiting_since=sa.func.coalesce(
                sa.case((c.waiting_for == WaitingFor.CUSTOMER.value, c.waiting_since), else_=None),
                now,
            ),
            next_action=next_action,
            client_secret=client_secret,
            updated_at=now,
        )

    def record_action_result_answered(
        self, payment_id: str, *, token: int, attempt: int, now: datetime
    ) -> PaymentRecord | None:
        """The provider answered forward ``attempt`` of the customer's result: it no longer
        waits to be sent (a later read replays it, ``ActionResult``).  Guarded by the
        number, so an answer to an older forward never clears a newer result the merchant
        sent meanwhile."""
        return self._update_one(
            None,
            sa.and_(self._held(payment_id, token), c.action_result_attempts == attempt),
            action_result_pending=False,
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
            self._held(payment_id, token),
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

    def fail_over(
        self,
        payment_id: str,
        *,
        token: int,
        failovers: int,
        connector_account_id: str | None,
        provider: str,
        route_attempts: list[dict[str, Any]],
        reason: str,
        now: datetime,
    ) -> PaymentRecord | None:
        """Move the payment to the next account of its route (decision 0086): attempt
        ``failovers + 1`` starts at ``accepted`` with nothing of the last attempt's provider
        state (its provider payment, confirm numbers, unknown outcomes, lookup, customer's
        result), the ended attempt appended to ``route_attempts``.  Guarded by the lease
        and by ``failovers`` (the attempt it leaves), so a stale decision cannot move a
        payment twice.  The caller writes the attempt's row and its proof in the same
        transaction (``AttemptRepository.add``)."""
        return self._update_one(
            "failover",
            sa.and_(self._held(payment_id, token), c.failovers == failovers),
            failovers=failovers + 1,
            connector_account_id=connector_account_id,
            provider=provider,
            route_attempts=route_attempts,
            recovery_point=RecoveryPoint.ACCEPTED.value,
            provider_payment_id=None,
            provider_charge_id=None,
            provider_outcome=None,
            failure_code=None,
            decline_code=None,
            failure_message=None,
            settled_amount=None,
            settled_currency=None,
            confirm_attempts=0,
            unknown_outcomes=0,
            first_create_at=None,
            last_create_at=None,
            lookup_pending=False,
            lookup_cursor=None,
            lookup_pages=0,
            waiting_for=None,
            waiting_since=None,
            next_action=None,
            client_secret=None,
            action_result=None,
            action_result_attempts=0,
            action_result_pending=False,
            last_error=reason[:2000],
            updated_at=now,
        )
