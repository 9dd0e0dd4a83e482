"""What the failover chaos tests share: the Adyen connector account and its route, the
payments' rows, who holds a lease, and both simulators' books per payment.

The payment count of each failover chaos run is ``PAYORCH_CHAOS_FAILOVER_PAYMENTS`` (default
below): the default keeps the chaos suite within a few minutes on a loaded two-core machine;
raise it for a longer run where time allows.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import sqlalchemy as sa

from devtools.adyen_simulator import RunningAdyenSimulator
from orchestrator.db.tables import payment_attempts, payments
from tests.harness.stack import Stack
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.support.processes import ManagedProcess, process_group

DEFAULT_PAYMENTS = 200


def payment_count(default: int = DEFAULT_PAYMENTS) -> int:
    """How many payments a failover chaos run makes (``PAYORCH_CHAOS_FAILOVER_PAYMENTS``)."""
    raw = os.environ.get("PAYORCH_CHAOS_FAILOVER_PAYMENTS", "")
    if not raw:
        return default
    count = int(raw)
    # The runs aim their faults at a few payments by position: fewer leaves them unplanned.
    assert count >= 20, f"PAYORCH_CHAOS_FAILOVER_PAYMENTS={raw}: at least 20"
    return count


def adyen_account(
    stack: Stack,
    adyen: RunningAdyenSimulator,
    *,
    rules: list[dict[str, Any]] | None = None,
    notify: bool = True,
) -> str:
    """The merchant's Adyen connector account, routed after the platform's Stripe account
    (``rules`` may route some payments otherwise); ``notify``: Adyen's notifications reach
    the API as they are made (else the simulator only keeps them)."""
    credentials = {"api_key": API_KEY, "merchant_account": MERCHANT, "hmac_key": HMAC_KEY}
    with stack.client() as client:
        created = client.post(
            "/v1/connector_accounts",
            json={"name": "Adyen EU", "provider": "adyen", "credentials": credentials},
        )
        assert created.status_code == 201, created.text
        account = str(created.json()["id"])
        routing = {
            "rules": [
                {**rule, "then": [account if a == "adyen" else a for a in rule["then"]]}
                for rule in rules or []
            ],
            "default": ["platform", account],
        }
        routed = client.put("/v1/routing", json=routing)
        assert routed.status_code == 200, routed.text
    if notify:
        adyen.admin.configure_notifications(notification_url(stack, account), HMAC_KEY)
    return account


def notification_url(stack: Stack, account: str) -> str:
    return f"{stack.api_url}/v1/providers/adyen/notifications/{account}"


def rows(stack: Stack) -> dict[str, dict[str, Any]]:
    """Every payment's row (the columns the failover tests read), by id."""
    with stack.container.engine.connect() as conn:
        return {
            str(r.id): dict(r._mapping)
            for r in conn.execute(
                sa.select(
                    payments.c.id,
                    payments.c.idempotency_key,
                    payments.c.status,
                    payments.c.failovers,
                    payments.c.provider,
                    payments.c.connector_account_id,
                    payments.c.lease_owner,
                    payments.c.lease_token,
                    payments.c.confirm_attempts,
                    payments.c.amount,
                )
            )
        }


def holder(workers: list[ManagedProcess], lease_owner: str | None) -> ManagedProcess | None:
    """The running worker whose process group holds a lease owned by ``lease_owner``."""
    suffix = (lease_owner or "").rsplit(":", 1)[-1]
    if not suffix.isdigit():
        return None
    pid = int(suffix)
    return next((w for w in workers if w.poll() is None and pid in process_group(w.pid)), None)


def connection_owners(local_port: int, pids: set[int]) -> set[int]:
    """Those of ``pids`` holding an open TCP socket bound to ``local_port`` on this host: the
    process that made a call the simulator logged from ``127.0.0.1:local_port``
    (``/proc/net/tcp`` names the socket's inode, ``/proc/<pid>/fd`` who has it open)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as listing:
                lines = listing.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == local_port:
                inodes.add(f"socket:[{fields[9]}]")
    owners = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone meanwhile
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    owners.add(pid)
            except OSError:
                continue
    return owners


def authorised_at_adyen(adyen: RunningAdyenSimulator) -> Counter[str]:
    """Authorisations that stand at Adyen, per record id (its books)."""
    books = adyen.admin.movements()["authorisations"]["by_reference"]
    return Counter({str(k): int(v) for k, v in books.items()})


def proofs(stack: Stack) -> Counter[str]:
    """Recorded proofs (a ``payment_attempts`` row with its reason and proof) per payment."""
    with stack.container.engine.connect() as conn:
        return Counter(
            str(r.payment_id)
            for r in conn.execute(
                sa.select(payment_attempts.c.payment_id).where(
                    payment_attempts.c.proof != "", payment_attempts.c.reason != ""
                )
            )
        )
