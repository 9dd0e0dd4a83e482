"""A small, realistic history for the console's page tests and the screenshots in the docs,
written through the real services (accept, the worker protocol with a scripted provider,
the operator's takeover): one payment of each kind an operator meets."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from orchestrator.domain.model import Role
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.takeover import Actor
from orchestrator.ops.commands import take_over_payment
from orchestrator.services.api_keys import create_client
from tests.harness.seeds import accept, force, reload
from tests.integration.hardening_helpers import Api
from tests.integration.lease_helpers import expire_leases

HOSTILE = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"


@dataclass(frozen=True)
class Story:
    succeeded: str
    declined: str
    parked: str
    stuck: str
    taken_over: str  # the payment page screenshot: takeover, unknown outcome, query first


def _run(api: Api, payment_id: str) -> None:
    record = reload(api.container, payment_id)
    process_payment(api.container.runner(), payment_id, record.lease_token, sleep=lambda _s: None)


def write_story(api: Api) -> Story:
    container = api.container
    shop = create_client(container.uow, "acme-shop", Role.MERCHANT).client
    operator = Actor.operator("cli_oncall", "alice (on call)")

    succeeded = accept(container, shop, "order-1001", amount=4200).id
    _run(api, succeeded)
    declined = accept(container, shop, "order-1002", payment_method="pm_card_chargeDeclined").id
    _run(api, declined)

    parked = accept(container, shop, "order-1003", amount=1250).id
    force(
        container,
        parked,
        status="needs_attention",
        lease_owner=None,
        locked_until=None,
        attempts=8,
        unknown_outcomes=8,
        last_error="OutcomeUnknown: provider timed out 8 times (parked after MAX_ATTEMPTS)",
        description=HOSTILE,
    )

    # A worker claimed it, then froze: its lease ran out a minute ago.
    stuck = accept(container, shop, "order-1004", amount=990).id
    token = reload(container, stuck).lease_token
    with container.uow() as uow:
        now = uow.now()
        uow.leases.claim(
            stuck,
            carried_token=token,
            owner="worker-b:31337",
            now=now,
            lease_until=now + timedelta(seconds=60),
        )
        uow.commit()
    expire_leases(container, [stuck], ago=timedelta(minutes=1))

    # The payment page's story: a frozen worker, an operator's takeover, then a confirm
    # whose answer is lost and a query that finds it succeeded.
    taken_over = accept(container, shop, "order-1005", amount=15000).id
    token = force(
        container, taken_over, customer_reference="cus-77", description="Order 1005"
    ).lease_token
    with container.uow() as uow:
        now = uow.now()
        uow.leases.claim(
            taken_over,
            carried_token=token,
            owner="worker-a:4242",
            now=now,
            lease_until=now + timedelta(seconds=60),
        )
        uow.commit()
    expire_leases(container, [taken_over], ago=timedelta(seconds=5))
    take_over_payment(
        container.uow,
        container.publisher,
        container.settings,
        operator,
        taken_over,
        reason="worker-a frozen (host paged)",
        force=False,
    )
    api.provider.fail("confirm", 3, "unknown_after_effect")
    _run(api, taken_over)
    return Story(succeeded, declined, parked, stuck, taken_over)
