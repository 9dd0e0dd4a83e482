"""The Stripe simulator's ``GET /v1/payment_intents`` page, found by bisection, against the
plain definition it replaced: every intent in the ``created`` bounds, newest first, cut at
the anchor, one page of it (Hypothesis draws the account, the bounds and the anchors)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.simulator import params as params_
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.state import PaymentState

BOUND_OPS = ("gt", "gte", "lt", "lte")


def expected_page(state: PaymentState, params: dict[str, Any]) -> tuple[list[str], bool]:
    """The definition: a filter over the whole account, newest first."""
    bounds = params_.created_bounds(params)
    limit = params_.limit(params)
    newest_first = sorted(state.intents.values(), key=lambda i: (i.created, i.seq), reverse=True)
    candidates = [i for i in newest_first if params_.within(i.created, bounds)]
    if "starting_after" in params:
        anchor = state.intents[params["starting_after"]]
        candidates = [i for i in candidates if (i.created, i.seq) < (anchor.created, anchor.seq)]
        page = candidates[:limit]
    elif "ending_before" in params:
        anchor = state.intents[params["ending_before"]]
        candidates = [i for i in candidates if (i.created, i.seq) > (anchor.created, anchor.seq)]
        page = candidates[-limit:]
    else:
        page = candidates[:limit]
    return [i.id for i in page], len(candidates) > len(page)


@settings(max_examples=150, deadline=None)
@given(
    created=st.lists(st.integers(0, 12), min_size=0, max_size=25),
    bounds=st.dictionaries(st.sampled_from(BOUND_OPS), st.integers(-1, 13), max_size=3),
    limit=st.integers(1, 6),
    anchor=st.one_of(
        st.none(), st.tuples(st.sampled_from(("starting_after", "ending_before")), st.integers())
    ),
)
def test_a_page_is_the_definitions_page(
    created: list[int],
    bounds: dict[str, int],
    limit: int,
    anchor: tuple[str, int] | None,
) -> None:
    state = PaymentState(SimulatorConfig())
    ids = [state.seed_intent(amount=100, payment_method=None, created=c) for c in created]
    params: dict[str, Any] = {"limit": str(limit)}
    if bounds:
        params["created"] = {op: str(value) for op, value in bounds.items()}
    if anchor is not None and ids:
        params[anchor[0]] = ids[anchor[1] % len(ids)]

    body = state.list_intents(params).body
    assert isinstance(body, dict)
    assert ([i["id"] for i in body["data"]], body["has_more"]) == expected_page(state, params)
