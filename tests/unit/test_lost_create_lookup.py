"""The bounded, resumable lookup against the in-memory fake provider."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.engine.kinds.lost_create_lookup import (
    LookupWindow,
    Verdict,
    lookup_window,
    scan_for_payment,
)
from orchestrator.engine.kinds.payment_match import ExpectedPayment
from orchestrator.providers.base import OutcomeUnknown
from tests.fakes.provider import FakeProvider

T0 = 1_800_000_000
EXPECTED = ExpectedPayment(record_id="pay_1", amount=2300, currency="usd", payment_method="pm_x")
WINDOW = LookupWindow(created_gte=T0 - 300, created_lte=T0 + 300)


class Progress:
    def __init__(self) -> None:
        self.saved: list[tuple[str | None, int, list[dict]]] = []

    def __call__(self, cursor, pages, rejected) -> None:
        self.saved.append((cursor, pages, list(rejected)))


def fill(provider: FakeProvider, count: int, *, created: int = T0 + 1) -> None:
    for _ in range(count):
        provider.add_intent(record_id=None, amount=999, created=created)


def scan(provider, *, budget=100, cursor=None, pages=0, rejected=(), progress=None):
    return scan_for_payment(
        provider,
        EXPECTED,
        WINDOW,
        cursor=cursor,
        pages_read=pages,
        rejected=list(rejected),
        page_budget=budget,
        save=progress or Progress(),
    )


def test_the_window_runs_from_the_first_create_to_the_last_plus_the_call_and_margins():
    first = datetime.fromtimestamp(T0, tz=UTC)
    last = datetime.fromtimestamp(T0 + 60, tz=UTC)

    window = lookup_window(first, last, margin_seconds=300, call_seconds=10)

    assert window.created_gte == T0 - 300
    assert window.created_lte == T0 + 60 + 10 + 300 + 1


def test_our_intent_below_many_newer_ones_is_found():
    provider = FakeProvider()
    ours = provider.add_intent(record_id="pay_1", amount=2300, payment_method="pm_x", created=T0)
    fill(provider, 250)

    result = scan(provider)

    assert result.verdict is Verdict.FOUND
    assert result.provider_payment is not None and result.provider_payment.id == ours
    assert len([c for c in provider.calls if c.operation == "lookup"]) == 3


def test_a_foreign_intent_naming_us_is_rejected_and_never_chosen():
    provider = FakeProvider()
    foreign = provider.add_intent(
        record_id="pay_1", amount=523001, payment_method="pm_x", created=T0
    )

    result = scan(provider)

    assert result.verdict is Verdict.FOREIGN_ONLY
    assert result.provider_payment is None
    assert [r["id"] for r in result.rejected] == [foreign]
    assert result.rejected[0]["reasons"] == ["amount 523001 != 2300"]


def test_ours_beside_an_older_foreign_one_is_found_and_the_foreign_one_kept():
    provider = FakeProvider()
    foreign = provider.add_intent(
        record_id="pay_1", amount=523002, payment_method="pm_x", created=T0
    )
    ours = provider.add_intent(record_id="pay_1", amount=2300, payment_method="pm_x", created=T0)

    result = scan(provider)

    assert result.verdict is Verdict.FOUND
    assert result.provider_payment is not None and result.provider_payment.id == ours
    assert foreign not in [r["id"] for r in result.rejected]  # ours came first, newest first
    provider2 = FakeProvider()
    ours2 = provider2.add_intent(record_id="pay_1", amount=2300, payment_method="pm_x", created=T0)
    foreign2 = provider2.add_intent(
        record_id="pay_1", amount=523002, payment_method="pm_x", created=T0
    )
    result2 = scan(provider2)
    assert result2.provider_payment is not None and result2.provider_payment.id == ours2
    assert [r["id"] for r in result2.rejected] == [foreign2]


def test_nothing_naming_us_in_the_whole_window_is_absent():
    provider = FakeProvider()
    fill(provider, 150)

    assert scan(provider).verdict is Verdict.ABSENT


def test_intents_outside_the_window_are_never_read():
    provider = FakeProvider()
    provider.add_intent(record_id="pay_1", amount=2300, payment_method="pm_x", created=T0 + 301)
    provider.add_intent(record_id="pay_1", amount=2300, payment_method="pm_x", created=T0 - 301)

    assert scan(provider).verdict is Verdict.ABSENT


def test_the_page_budget_stops_the_scan_and_the_cursor_resumes_it():
    provider = FakeProvider()
    ours = provider.add_intent(record_id="pay_1", amount=2300, payment_method="pm_x", created=T0)
    fill(provider, 450)
    progress = Progress()

    first = scan(provider, budget=2, progress=progress)

    assert first.verdict is Verdict.UNFINISHED
    cursor, pages, _ = progress.saved[-1]
    assert pages == 2 and cursor is not None
    second = scan(provider, budget=10, cursor=cursor, pages=pages)
    assert second.verdict is Verdict.FOUND
    assert second.provider_payment is not None and second.provider_payment.id == ours
    # 2 pages, then 3 more from the cursor: nothing read twice.
    assert len([c for c in provider.calls if c.operation == "lookup"]) == 5


def test_progress_is_saved_before_every_page():
    provider = FakeProvider()
    fill(provider, 250)
    progress = Progress()

    scan(provider, progress=progress)

    assert [pages for _, pages, _ in progress.saved] == [0, 1, 2]
    assert progress.saved[0][0] is None


def test_a_failed_page_is_an_unknown_outcome_never_absent():
    provider = FakeProvider()
    fill(provider, 250)
    provider.fail("lookup", 2, "unknown_before_effect")
    progress = Progress()

    with pytest.raises(OutcomeUnknown):
        scan(provider, progress=progress)

    assert progress.saved[-1][1] == 1  # the cursor of the failed page is stored
