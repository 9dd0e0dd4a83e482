"""The failover decision, every class of outcome (decision 0086), the decline tables that
feed it (decision 0087), the keys of each attempt, and the attempts a payment shows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.domain.attempts import ended_attempt, shown_attempts
from orchestrator.domain.failover import (
    Decision,
    after_circuit_open,
    after_decline,
    following_accounts,
    has_unresolved_call,
    next_account,
    skipped_accounts,
)
from orchestrator.domain.model import Failure
from orchestrator.domain.states import PaymentStatus
from orchestrator.providers import keys
from orchestrator.providers.adyen_declines import REFUSALS, refusal
from orchestrator.providers.stripe_declines import DECLINE_CODES, ERROR_CODES, decline_class
from tests.unit.records import CREATED, a_record

A, B, C = "ca_a", "ca_b", "ca_c"
ROUTED = a_record(route=(A, B), connector_account_id=A)
ALL = frozenset({A, B, C, "platform"})  # every account of every route here enabled


# -- the route ------------------------------------------------------------------------------


def test_the_next_account_follows_the_route_by_the_number_of_failovers() -> None:
    three = a_record(route=(A, B, C), connector_account_id=A)
    assert next_account(three, ALL) == B
    assert next_account(a_record(route=(A, B, C), connector_account_id=B, failovers=1), ALL) == C
    assert next_account(a_record(route=(A, B, C), connector_account_id=C, failovers=2), ALL) is None


def test_a_one_account_route_or_a_payment_stored_without_a_route_has_no_next_account() -> None:
    assert next_account(a_record(route=(A,), connector_account_id=A), ALL) is None
    assert next_account(a_record(), ALL) is None  # the one-statement accept stores no route


# -- accounts disabled since the accept -----------------------------------------------------


def test_a_disabled_next_account_is_passed_over_for_the_next_enabled_one() -> None:
    three = a_record(route=(A, B, C), connector_account_id=A)
    enabled = frozenset({C})  # B disabled after the accept
    assert next_account(three, enabled) == C
    assert skipped_accounts(three, enabled) == (B,)
    assert after_decline(three, "provider", enabled) is Decision.FAIL_OVER


def test_a_provider_decline_with_every_following_account_disabled_fails_the_payment() -> None:
    assert next_account(ROUTED, frozenset()) is None
    assert skipped_accounts(ROUTED, frozenset()) == (B,)
    assert after_decline(ROUTED, "provider", frozenset()) is Decision.FAIL


def test_an_open_circuit_with_every_following_account_disabled_waits() -> None:
    assert after_circuit_open(ROUTED, frozenset()) is Decision.WAIT


def test_after_a_skip_the_position_is_the_current_accounts_not_the_failover_count() -> None:
    # Moved from A to C (B skipped): one failover, but nothing follows C.
    at_c = a_record(route=(A, B, C), connector_account_id=C, failovers=1)
    assert following_accounts(at_c) == ()
    assert next_account(at_c, ALL) is None
    assert after_decline(at_c, "provider", ALL) is Decision.FAIL


def test_the_platform_account_is_an_entry_like_any_other() -> None:
    on_platform = a_record(route=("platform", A, B))
    assert following_accounts(on_platform) == (A, B)
    assert next_account(on_platform, frozenset({B})) == B


# -- a decline the provider answered --------------------------------------------------------


def test_a_provider_decline_with_a_next_account_fails_over() -> None:
    assert after_decline(ROUTED, "provider", ALL) is Decision.FAIL_OVER


def test_a_card_decline_fails_the_payment_even_with_a_next_account() -> None:
    assert after_decline(ROUTED, "card", ALL) is Decision.FAIL


def test_a_decline_its_adapter_did_not_classify_fails_the_payment() -> None:
    assert after_decline(ROUTED, None, ALL) is Decision.FAIL


def test_a_provider_decline_at_the_last_account_fails_the_payment() -> None:
    last = a_record(route=(A, B), connector_account_id=B, failovers=1)
    assert after_decline(last, "provider", ALL) is Decision.FAIL


# -- an open circuit ------------------------------------------------------------------------


def test_an_open_circuit_with_nothing_sent_and_a_next_account_fails_over() -> None:
    assert not has_unresolved_call(ROUTED)
    assert after_circuit_open(ROUTED, ALL) is Decision.FAIL_OVER


@pytest.mark.parametrize(
    "sent",
    [
        {"confirm_attempts": 1},  # a confirm number taken: the confirm may have gone
        {"unknown_outcomes": 1},  # a call whose outcome is unknown
        {"action_result_pending": True},  # a customer's result waiting to be forwarded
        {"lookup_pending": True},  # a create whose outcome is unknown
    ],
)
def test_an_open_circuit_after_a_call_that_may_have_moved_money_waits(
    sent: dict[str, object],
) -> None:
    record = a_record(route=(A, B), connector_account_id=A, **sent)
    assert has_unresolved_call(record)
    assert after_circuit_open(record, ALL) is Decision.WAIT


def test_an_open_circuit_with_no_next_account_waits() -> None:
    assert after_circuit_open(a_record(route=(A,), connector_account_id=A), ALL) is Decision.WAIT


# -- the decline tables ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "decline_code", "kind"),
    [
        ("card_declined", "insufficient_funds", "card"),
        ("card_declined", "do_not_honor", "card"),
        ("card_declined", "stolen_card", "card"),
        ("card_declined", "generic_decline", "card"),
        ("card_declined", "issuer_not_available", "provider"),
        ("card_declined", "try_again_later", "provider"),
        ("card_declined", "reenter_transaction", "provider"),
        ("processing_error", "processing_error", "provider"),
        ("processing_error", None, "provider"),
        ("expired_card", "expired_card", "card"),
        ("incorrect_cvc", None, "card"),
        ("card_declined", "a_code_stripe_adds_later", "card"),
        (None, None, "card"),
    ],
)
def test_stripe_declines_are_classified_by_decline_code_then_code(
    code: str | None, decline_code: str | None, kind: str
) -> None:
    assert decline_class(code, decline_code) == kind


def test_stripe_tables_name_only_the_two_classes_and_few_provider_codes() -> None:
    classes = set(DECLINE_CODES.values()) | set(ERROR_CODES.values())
    assert classes == {"card", "provider"}
    provider = {c for c, k in DECLINE_CODES.items() if k == "provider"}
    assert provider == {
        "issuer_not_available",
        "processing_error",
        "reenter_transaction",
        "try_again_later",
    }


@pytest.mark.parametrize(
    ("code", "result_code", "kind"),
    [
        ("2", "Refused", "card"),  # Refused
        ("12", "Refused", "card"),  # Not enough balance: the merchant's retry, not ours
        ("6", "Refused", "card"),  # Expired Card
        ("4", "Refused", "provider"),  # Acquirer Error
        ("9", "Refused", "provider"),  # Issuer Unavailable
        ("21", "Refused", "provider"),  # Not Submitted
        ("4", "Error", "provider"),
        ("2", "Error", "provider"),  # resultCode Error is Adyen's failure, whatever code
        (None, "Error", "provider"),
        ("999", "Refused", "card"),  # unknown: never a guess
        (None, "Refused", "card"),
    ],
)
def test_adyen_refusals_are_classified_by_refusal_reason_code_and_result_code(
    code: str | None, result_code: str, kind: str
) -> None:
    assert refusal(code, None, result_code=result_code).kind == kind


def test_adyen_table_classes_are_card_or_provider() -> None:
    assert {r.kind for r in REFUSALS.values()} == {"card", "provider"}


# -- the keys of each attempt ---------------------------------------------------------------


def test_the_first_attempt_keeps_the_keys_payorch_always_sent() -> None:
    assert keys.create_key("pay_1") == keys.create_key("pay_1", 1) == "payorch-pay_1-create"
    assert keys.confirm_key("pay_1", 2, 1) == "payorch-pay_1-confirm-2"
    assert keys.details_key("pay_1", 1, 1) == "payorch-pay_1-details-1"
    assert keys.technical_cancel_key("pay_1", 1) == "payorch-pay_1-technical-cancel"


def test_a_later_attempt_derives_keys_no_earlier_attempt_used() -> None:
    first = {
        keys.create_key("pay_1", 1),
        keys.confirm_key("pay_1", 1, 1),
        keys.details_key("pay_1", 1, 1),
        keys.technical_cancel_key("pay_1", 1),
    }
    second = {
        keys.create_key("pay_1", 2),
        keys.confirm_key("pay_1", 1, 2),
        keys.details_key("pay_1", 1, 2),
        keys.technical_cancel_key("pay_1", 2),
    }
    assert keys.confirm_key("pay_1", 1, 2) == "payorch-pay_1-a2-confirm-1"
    assert first.isdisjoint(second)
    assert second.isdisjoint({keys.confirm_key("pay_1", 1, 3), keys.create_key("pay_1", 3)})


# -- the attempts a payment shows -----------------------------------------------------------


def test_a_payment_that_never_failed_over_shows_one_attempt_from_its_row() -> None:
    record = a_record(connector_account_id=A, provider_payment_id="pi_1")
    [attempt] = shown_attempts(record, "processing")
    assert attempt["connector_account"] == A
    assert attempt["provider_payment_id"] == "pi_1"
    assert attempt["status"] == "processing"
    assert attempt["ended_at"] is None
    assert attempt["started_at"] == "2026-12-01T08:00:00.123456Z"


def test_a_platform_payment_shows_its_attempt_at_the_platform_account() -> None:
    [attempt] = shown_attempts(a_record(), "processing")
    assert attempt["connector_account"] == "platform"


def test_after_a_failover_the_ended_attempt_comes_first_and_the_current_starts_when_it_ended():
    failed_at = CREATED + timedelta(seconds=3)
    leaving = a_record(route=(A, B), connector_account_id=A, provider_payment_id="pi_1")
    ended = ended_attempt(
        leaving,
        failure=Failure(code="processing_error", message="try again", decline_code=None),
        started_at=CREATED,
        ended_at=failed_at,
    )
    now = a_record(
        route=(A, B),
        connector_account_id=B,
        provider="adyen",
        failovers=1,
        route_attempts=(ended,),
        status=PaymentStatus.SUCCEEDED,
        completed_at=failed_at + timedelta(seconds=1),
    )
    first, second = shown_attempts(now, "succeeded")
    assert (first["connector_account"], first["status"]) == (A, "failed")
    assert first["failure"]["code"] == "processing_error"
    assert (second["connector_account"], second["provider"], second["status"]) == (
        B,
        "adyen",
        "succeeded",
    )
    assert second["started_at"] == first["ended_at"]
    assert second["ended_at"] == "2026-12-01T08:00:04.123456Z"
