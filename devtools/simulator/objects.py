"""Object shapes, as Stripe writes them.

The top-level fields of a PaymentIntent come from Stripe's own fixture (``payment_intent.json``,
copied from stripe's fixtures3.json ``resources.payment_intent``), so a simulated intent has
every field a real one has, in the same order.  The fixture's values are placeholders (its
``canceled_at`` is set and its ``last_payment_error`` is an idempotency error), so every value
is written here from the simulator's records; a fixture field the simulator does not model is
``null``.
"""

from __future__ import annotations

import copy
import json
import random
import string
from functools import cache
from importlib import resources
from typing import Any

from devtools.simulator.models import Charge, Dispute, Intent, PaymentMethod, Refund
from orchestrator.providers import keys

_ID_ALPHABET = string.ascii_letters + string.digits
# Ids only need to be unique, not secret; one generator seeded from the OS at import is
# several times faster than ``secrets`` per character, which matters under the benchmark.
_ID_RANDOM = random.Random()


def random_token(length: int) -> str:
    return "".join(_ID_RANDOM.choices(_ID_ALPHABET, k=length))


def new_id(prefix: str, length: int = 24) -> str:
    """Stripe-looking ids: ``pi_3PgafyB7WZ01zgkW0…``."""
    return f"{prefix}_{random_token(length)}"


def new_request_id() -> str:
    return new_id("req", 14)


@cache
def fixture(name: str) -> dict[str, Any]:
    """One of Stripe's official fixtures (``payment_intent``, ``refund``, ``charge``,
    ``event``, ``dispute``), as shipped inside the package."""
    text = resources.files("devtools.simulator").joinpath(f"{name}.json").read_text("utf-8")
    data = json.loads(text)
    assert isinstance(data, dict)
    return data


def fixture_payment_intent() -> dict[str, Any]:
    """Stripe's official payment_intent fixture, as shipped inside the package."""
    return fixture("payment_intent")


@cache
def _field_order(name: str) -> tuple[str, ...]:
    return tuple(fixture(name))


def _in_fixture_order(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """Fixture order first (a fixture field not modelled here is null), then anything extra."""
    ordered = {key: values.pop(key, None) for key in _field_order(name)}
    ordered.update(values)
    return ordered


def _card_options() -> dict[str, Any]:
    return {
        "card": {
            "installments": None,
            "mandate_options": None,
            "network": None,
            "request_three_d_secure": "automatic",
        }
    }


def render_intent(intent: Intent) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": intent.id,
        "object": "payment_intent",
        "amount": intent.amount,
        "amount_details": {"tip": {}},
        "amount_received": intent.amount_received,
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": (
            dict(intent.automatic_payment_methods) if intent.automatic_payment_methods else None
        ),
        "amount_capturable": intent.amount_capturable,
        "canceled_at": intent.canceled_at,
        "cancellation_reason": intent.cancellation_reason,
        "capture_method": intent.capture_method,
        "client_secret": intent.client_secret,
        "confirmation_method": intent.confirmation_method,
        "created": intent.created,
        "currency": intent.currency,
        "customer": intent.customer,
        "customer_account": None,
        "description": intent.description,
        "excluded_payment_method_types": None,
        "last_payment_error": (
            json.loads(json.dumps(intent.last_payment_error))
            if intent.last_payment_error is not None
            else None
        ),
        "latest_charge": intent.latest_charge,
        "livemode": False,
        "managed_payments": None,
        "metadata": dict(intent.metadata),
        "next_action": copy.deepcopy(intent.next_action),
        "on_behalf_of": None,
        "payment_method": intent.payment_method,
        "payment_method_configuration_details": None,
        "payment_method_options": _card_options(),
        "payment_method_types": list(intent.payment_method_types),
        "processing": None,
        "receipt_email": intent.receipt_email,
        "review": None,
        "setup_future_usage": None,
        "shipping": None,
        "source": None,
        "statement_descriptor": intent.statement_descriptor,
        "statement_descriptor_suffix": intent.statement_descriptor_suffix,
        "status": intent.status,
        "transfer_data": None,
        "transfer_group": None,
    }
    return _in_fixture_order("payment_intent", values)


def render_refund(refund: Refund) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": refund.id,
        "object": "refund",
        "amount": refund.amount,
        # Stripe books a balance transaction for a refund that took money back.
        "balance_transaction": (
            f"txn_{refund.id[3:]}" if refund.status in ("succeeded", "failed") else None
        ),
        "charge": refund.charge_id,
        "created": refund.created,
        "currency": refund.currency,
        "destination_details": {"card": {"type": "refund"}, "type": "card"},
        "metadata": dict(refund.metadata),
        "payment_intent": refund.intent_id,
        "reason": refund.reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": refund.status,
        "transfer_reversal": None,
        "customer": None,
        "customer_account": None,
        "payment_method": None,
    }
    if refund.failure_reason is not None:
        values["failure_reason"] = refund.failure_reason
        values["failure_balance_transaction"] = f"txn_f{refund.id[4:]}"
    return _in_fixture_order("refund", values)


def render_payment_method(method: PaymentMethod) -> dict[str, Any]:
    card = method.card
    return {
        "id": method.id,
        "object": "payment_method",
        "allow_redisplay": "unspecified",
        "billing_details": {
            "address": {
                "city": None,
                "country": None,
                "line1": None,
                "line2": None,
                "postal_code": None,
                "state": None,
            },
            "email": None,
            "name": None,
            "phone": None,
        },
        "card": {
            "brand": card.brand,
            "checks": {
                "address_line1_check": None,
                "address_postal_code_check": None,
                "cvc_check": "unchecked",
            },
            "country": card.country,
            "display_brand": card.brand,
            "exp_month": 12,
            "exp_year": 2034,
            "funding": card.funding,
            "generated_from": None,
            "last4": card.last4,
            "networks": {"available": [card.brand], "preferred": None},
            "three_d_secure_usage": {"supported": True},
            "wallet": None,
        },
        "created": method.created,
        "customer": None,
        "livemode": False,
        "metadata": {},
        "type": "card",
    }


def render_list(url: str, data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": has_more, "url": url}


def render_search_result(
    url: str, data: list[dict[str, Any]], has_more: bool, next_page: str | None
) -> dict[str, Any]:
    return {
        "object": "search_result",
        "data": data,
        "has_more": has_more,
        "next_page": next_page,
        "url": url,
    }


def render_charge(charge: Charge, refunds: list[Refund]) -> dict[str, Any]:
    """A charge as Stripe's events carry it (``charge.refunded``); the simulator has no
    ``/v1/charges`` endpoint, so this is the only place a charge is rendered."""
    values: dict[str, Any] = {
        "id": charge.id,
        "object": "charge",
        "amount": charge.amount,
        "amount_captured": charge.amount_captured,
        "amount_refunded": charge.amount_refunded,
        "balance_transaction": f"txn_{charge.id[3:]}" if charge.captured else None,
        # Required by Stripe's schema (an expanded balance transaction source is validated).
        "billing_details": {
            "address": dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state")),
            "email": None,
            "name": None,
            "phone": None,
        },
        "captured": charge.captured,
        "created": charge.created,
        "currency": charge.currency,
        "disputed": charge.disputed,
        "livemode": False,
        # Stripe copies the PaymentIntent's metadata onto its charges; the simulator keeps
        # the one key it needs (our record id).
        "metadata": ({keys.RECORD_ID_METADATA_KEY: charge.record_id} if charge.record_id else {}),
        "paid": True,
        "payment_intent": charge.intent_id,
        "payment_method": charge.payment_method,
        "refunded": charge.amount_captured > 0 and charge.amount_refunded == charge.amount_captured,
        "refunds": render_list(
            f"/v1/charges/{charge.id}/refunds", [render_refund(r) for r in refunds], False
        ),
        "status": "succeeded",
    }
    return _in_fixture_order("charge", values)


def render_dispute(dispute: Dispute) -> dict[str, Any]:
    fixture_evidence = fixture("dispute")["evidence"]
    values: dict[str, Any] = {
        "id": dispute.id,
        "object": "dispute",
        "amount": dispute.amount,
        "balance_transactions": [],
        "charge": dispute.charge_id,
        "created": dispute.created,
        "currency": dispute.currency,
        "evidence": {key: None for key in fixture_evidence} | {"enhanced_evidence": {}},
        "evidence_details": {
            "due_by": dispute.created + 7 * 24 * 3600,
            "has_evidence": False,
            "past_due": False,
            "submission_count": 0,
            "enhanced_eligibility": {},
        },
        "is_charge_refundable": False,
        "livemode": False,
        "metadata": {},
        "payment_intent": dispute.intent_id,
        "reason": dispute.reason,
        "status": dispute.status,
    }
    return _in_fixture_order("dispute", values)


def render_event(
    *,
    event_id: str,
    type_: str,
    created: int,
    data: dict[str, Any],
    api_version: str,
    request: dict[str, Any],
    pending_webhooks: int,
) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": event_id,
        "object": "event",
        "api_version": api_version,
        "created": created,
        "data": data,
        "livemode": False,
        "pending_webhooks": pending_webhooks,
        "request": request,
        "type": type_,
    }
    return _in_fixture_order("event", values)
