"""At accept, before the claim: which connector account a payment runs on, and whether
the customer and saved method it names are this merchant's (decisions 0062, 0063).

Runs in the claim's unit of work on the thread path (``services.accept``), before the
payment's INSERT; a refusal raises before anything is stored and long before anything
reaches a provider.  The fast paths never see a request that needs it: they hand every
request that pins an account, names a customer or a method that could be a saved one, and
every merchant with a default account, to the thread path.

Ownership (``domain.method_ownership``): a ``customer`` belongs to the first merchant
whose payment names it; a saved method used with a customer follows that customer; a
method used alone is a one-time method and belongs to nobody, unless it was used with a
customer before (then it is that customer's merchant's); a provider's shared test tokens
belong to nobody.  Each claim is an ``INSERT … ON CONFLICT DO NOTHING`` and a read of the
owner: concurrent first uses agree on one owner.
"""

from __future__ import annotations

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.connector_accounts import ConnectorAccount, is_connector_account_id
from orchestrator.domain.method_ownership import ForeignPaymentMethod, OwnedKind
from orchestrator.domain.model import ApiClient, PaymentRequest
from orchestrator.providers.credentials import is_shared_test_method


def needs_ownership_check(payment_method: str, customer: str | None) -> bool:
    """Whether an accept must look at ownership at all: a payment with neither a customer
    nor a method that could be someone's saved one needs no read."""
    return customer is not None or (
        bool(payment_method) and not is_shared_test_method(payment_method)
    )


class UnusableConnectorAccount(Exception):
    """The pinned account is not one of the merchant's enabled accounts (400 naming
    ``connector_account``)."""

    def __init__(self, message: str, *, field: str = "connector_account") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def needs_thread_path(client_default: str | None, request: PaymentRequest) -> bool:
    """Whether an accept needs ``choose_account``/``claim_ownership`` (the fast paths
    cannot run them)."""
    return (
        client_default is not None
        or request.connector_account is not None
        or bool(request.payment_methods)
        or any(needs_ownership_check(m, request.customer) for m in _token_methods(request))
    )


def _token_methods(request: PaymentRequest) -> list[str]:
    """Every method id the request names (``payment_method`` and the string entries of
    ``payment_methods``; a provider's method object is one-time, nobody's)."""
    return [method for _field, method in _named_methods(request)]


def request_needs_thread_path(request: PaymentRequest) -> bool:
    """``needs_thread_path`` for what the request alone says (the client is not known
    yet)."""
    return needs_thread_path(None, request)


def choose_account(
    uow: UnitOfWork, client: ApiClient, request: PaymentRequest
) -> ConnectorAccount | None:
    """The account a new payment runs on: the one it pins (the merchant's own and
    enabled), else the merchant's default (None: the platform's own account).  The record
    names the account's provider, so the default is read too (by its key; a merchant with
    no account never comes here, it takes the fast paths)."""
    pinned = request.connector_account
    if pinned is None:
        default = client.default_connector_account_id
        return None if default is None else uow.connector_accounts.get(default)
    account = (
        uow.connector_accounts.get(pinned, client_id=client.id)
        if is_connector_account_id(pinned)
        else None
    )
    if account is None:
        raise UnusableConnectorAccount(
            f"connector_account {pinned!r} is not one of your connector accounts."
        )
    if not account.enabled:
        raise UnusableConnectorAccount(
            f"connector_account {pinned} is disabled: enable another or name none."
        )
    return account


def claim_ownership(uow: UnitOfWork, client: ApiClient, request: PaymentRequest) -> None:
    """Record first uses, refuse another merchant's ids (``ForeignPaymentMethod``).  The
    caller runs this before the payment's INSERT; a refusal leaves only what an earlier
    statement of this merchant's own recorded (never a payment)."""
    customer = request.customer
    # (field, method id) for every saved method the request may use, with the field a
    # refusal names.
    saved = [
        (field, method)
        for field, method in _named_methods(request)
        if not is_shared_test_method(method)
    ]
    if customer is None and not saved:
        return
    now = uow.now()
    # Read first: a method already someone's must not let this merchant claim a customer
    # (or another of its methods) on the way to the refusal.
    for field, method in saved:
        owner = uow.method_owners.owner_of(OwnedKind.PAYMENT_METHOD, method)
        if owner is not None and owner.client_id != client.id:
            raise ForeignPaymentMethod(field)
    if customer is None:
        return
    owner = uow.method_owners.claim(
        OwnedKind.CUSTOMER, customer, client_id=client.id, customer=None, now=now
    )
    if owner.client_id != client.id:
        raise ForeignPaymentMethod("customer")
    for field, method in saved:
        owner = uow.method_owners.claim(
            OwnedKind.PAYMENT_METHOD, method, client_id=client.id, customer=customer, now=now
        )
        if owner.client_id != client.id:
            raise ForeignPaymentMethod(field)


def _named_methods(request: PaymentRequest) -> list[tuple[str, str]]:
    named = [
        (f"payment_methods.{account}", method)
        for account, method in request.payment_methods.items()
        if isinstance(method, str)
    ]
    if request.payment_method:
        named.insert(0, ("payment_method", request.payment_method))
    return named
