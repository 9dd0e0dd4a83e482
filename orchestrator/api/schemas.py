"""Input and output schemas of the HTTP API (separate, as they evolve separately)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from orchestrator.domain.currencies import (
    CURRENCY_RULE,
    MAX_AMOUNT,
    SUPPORTED_CURRENCIES,
    supported_currency,
)
from orchestrator.domain.minimums import minimum_charge_amount
from orchestrator.domain.model import PaymentRequest
from orchestrator.domain.text import CONTROL_CLASS, IDENTIFIER_CONTROL_CLASS, text_problem

# The control characters refused in free text: orchestrator.domain.text (one rule for the
# API's schemas, the console's forms and the CLI's reasons).
_CONTROL_CLASS = CONTROL_CLASS
_IDENTIFIER_CONTROL_CLASS = IDENTIFIER_CONTROL_CLASS
_IDENTIFIER_CONTROL = re.compile(f"[{_IDENTIFIER_CONTROL_CLASS}]")
TEXT_PATTERN = f"^[^{_CONTROL_CLASS}]*$"
IDENTIFIER_PATTERN = f"^[^{_IDENTIFIER_CONTROL_CLASS}]*$"
METADATA_KEY_PATTERN = f"^[^{_IDENTIFIER_CONTROL_CLASS}\\[\\]]+$"

# The shape of orchestrator.domain.ids.new_payment_id(); the API answers 404 for any other
# id without a lookup, and documents it on every {payment_id}.

# Stripe's customer ids.
CUSTOMER_PATTERN = r"^cus_[A-Za-z0-9]+$"
# Optional request fields added after Part 1 (see PaymentCreate.fingerprint_body).
PART2_OPTIONAL_FIELDS: tuple[str, ...] = (
    "customer",
    "off_session",
    "return_url",
    "capture_method",
    "connector_account",
    "payment_methods",
    "payment_method",
)
MAX_PAYMENT_METHODS = 10  # a route names at most domain.routing.MAX_ROUTE_LENGTH accounts

MAX_METADATA_KEYS = 50  # Stripe's limits, so nothing we accept is refused downstream
MAX_METADATA_KEY_LENGTH = 40
MAX_METADATA_VALUE_LENGTH = 500


def _clean_text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _clean_identifier(value: str) -> str:
    if _IDENTIFIER_CONTROL.search(value):
        raise ValueError("must not contain control characters or line breaks")
    return _clean_text(value)


def _integral_number(value: object) -> object:
    """JSON has one number type: ``1999.0`` and ``1.999e3`` denote the integer 1999 (JSON
    Schema's ``integer`` says the same), so they are that integer.  ``19.99``, infinity
    (``1e400``) and every non-number are still refused by the strict integer check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _currency(value: object, handler: ValidatorFunctionWrapHandler) -> str:
    """Wraps the declared checks (a string, three ASCII letters): whichever fails, and for
    a well-formed code Stripe does not support, the refusal is ``CURRENCY_RULE``, so
    "USD1", "", 12 and "zzz" read the same (pydantic's own wording named a different rule
    for each)."""
    try:
        checked = handler(value)
    except ValidationError:
        raise ValueError(CURRENCY_RULE) from None
    code = supported_currency(checked)
    if code is None:
        raise ValueError(CURRENCY_RULE)
    return code


def _any_case_pattern(codes: frozenset[str]) -> str:
    """A regular expression for exactly the accepted codes in any letter case, for the
    OpenAPI document (JSON Schema has no case-insensitive flag): ``[uU][sS][dD]|…``."""
    spelled = ("".join(f"[{c}{c.upper()}]" for c in code) for code in sorted(codes))
    return "^(?:" + "|".join(spelled) + ")$"


def _metadata(value: dict[str, str]) -> dict[str, str]:
    """Every message names the offending key: with 50 keys, "keys must be ..." alone leaves
    the merchant guessing which one."""
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"may have at most {MAX_METADATA_KEYS} keys, not {len(value)}")
    for key, item in value.items():
        name = _quoted_key(key)
        if not key or len(key) > MAX_METADATA_KEY_LENGTH:
            raise ValueError(f"key {name} must be 1-{MAX_METADATA_KEY_LENGTH} characters")
        if "[" in key or "]" in key:
            raise ValueError(f"key {name} must not contain square brackets")
        try:
            _clean_identifier(key)
        except ValueError as error:
            raise ValueError(f"key {name} {error}") from None
        if len(item) > MAX_METADATA_VALUE_LENGTH:
            raise ValueError(
                f"the value of key {name} must be at most {MAX_METADATA_VALUE_LENGTH} characters"
            )
        try:
            _clean_text(item)
        except ValueError as error:
            raise ValueError(f"the value of key {name} {error}") from None
    return value


def _quoted_key(key: str) -> str:
    # repr() shows control characters and lone surrogates as escapes, so the message stays
    # one printable line; a very long key is cut (the client knows the rest).
    shown = key if len(key) <= MAX_METADATA_KEY_LENGTH else key[:MAX_METADATA_KEY_LENGTH] + "..."
    return ascii(shown)


def _metadata_schema(schema: dict[str, Any]) -> None:
    """What ``_metadata`` enforces, in JSON Schema terms (pydantic writes ``maxLength`` for
    a dict's size, which JSON Schema ignores on objects)."""
    schema.pop("maxLength", None)
    schema["maxProperties"] = MAX_METADATA_KEYS
    schema["propertyNames"] = {
        "minLength": 1,
        "maxLength": MAX_METADATA_KEY_LENGTH,
        "pattern": METADATA_KEY_PATTERN,
    }
    schema["additionalProperties"] = {
        "type": "string",
        "maxLength": MAX_METADATA_VALUE_LENGTH,
        "pattern": TEXT_PATTERN,
    }


def _return_url(value: str) -> str:
    """An absolute http(s) URL: where the customer's browser is sent back after a
    redirect-based authentication (Stripe refuses a relative one)."""
    _clean_identifier(value)
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ValueError("must be an absolute http:// or https:// URL")
    return value


Text = Annotated[str, AfterValidator(_clean_text)]
Identifier = Annotated[str, AfterValidator(_clean_identifier)]
# The free text of any request body outside payments (a reason, a description): stripped,
# no control characters (a 400 naming the field, never the 500 of a NUL reaching
# PostgreSQL), and the same rule in the OpenAPI document.  Add the length where it is used:
# ``Annotated[FreeText, StringConstraints(min_length=1, max_length=1000)]``.
FreeText = Annotated[
    Text,
    StringConstraints(strip_whitespace=True),
    Field(json_schema_extra={"pattern": TEXT_PATTERN}),
]


class PaymentCreate(BaseModel):
    """``POST /v1/payments`` body.  Strict: ``"100"`` is not an amount, ``true`` is not 1."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: Annotated[
        int,
        Field(gt=0, le=MAX_AMOUNT, description="Minor units (cents)."),
        BeforeValidator(_integral_number),  # after the constraints: it runs before them
    ]
    currency: Annotated[
        str,
        # ASCII letters only: str.lower() maps some non-ASCII letters to ASCII ones (the
        # Kelvin sign U+212A becomes "k"), which would let "\u212arw" pass as "krw".
        StringConstraints(min_length=3, max_length=3, pattern=r"^[A-Za-z]{3}$"),
        WrapValidator(_currency),
        Field(
            description="ISO 4217 code of a currency Stripe supports, in any letter case "
            "('USD' and 'usd' are the same request); stored and returned lower-case.",
            examples=["usd"],
            json_schema_extra={"pattern": _any_case_pattern(SUPPORTED_CURRENCIES)},
        ),
    ]
    payment_method: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_]+$"),
        ]
        | None
    ) = Field(
        default=None,
        description="Provider payment method token, used with every account of the route "
        "that `payment_methods` does not name. Required unless `payment_methods` is sent.",
        examples=["pm_card_visa"],
        json_schema_extra={"pattern": r"^[A-Za-z0-9_]+$"},
    )
    # ``pattern`` next to ``anyOf [string, null]`` applies to the string only.
    customer_reference: Annotated[Identifier, StringConstraints(max_length=255)] | None = Field(
        default=None, json_schema_extra={"pattern": IDENTIFIER_PATTERN}
    )
    description: Annotated[Text, StringConstraints(max_length=1000)] | None = Field(
        default=None, json_schema_extra={"pattern": TEXT_PATTERN}
    )
    metadata: Annotated[
        dict[
            Annotated[str, StringConstraints(max_length=MAX_METADATA_KEY_LENGTH)],
            Annotated[str, StringConstraints(max_length=MAX_METADATA_VALUE_LENGTH)],
        ],
        AfterValidator(_metadata),
        Field(
            max_length=MAX_METADATA_KEYS,
            description=f"Up to {MAX_METADATA_KEYS} string pairs, passed to the provider.",
            json_schema_extra=_metadata_schema,
        ),
    ] = Field(default_factory=dict)
    customer: (
        Annotated[str, StringConstraints(min_length=5, max_length=255, pattern=CUSTOMER_PATTERN)]
        | None
    ) = Field(
        default=None,
        description="The provider's customer (`cus_…`): a saved card needs it.",
        examples=["cus_NffrFeUfNV2Hib"],
    )
    off_session: bool | None = Field(
        default=None,
        description="true: a merchant-initiated charge without the customer present; a card "
        "that would need authentication then fails with `authentication_required`. false: "
        "the customer is present and may be asked to authenticate (`return_url` required).",
    )
    return_url: (
        Annotated[str, StringConstraints(max_length=2048), AfterValidator(_return_url)] | None
    ) = Field(
        default=None,
        description="Where a redirect-based authentication (3-D Secure) sends the customer "
        "back: required when `off_session` is false, refused when it is true.",
        examples=["https://shop.example/checkout/complete"],
    )
    capture_method: Literal["automatic", "manual"] | None = Field(
        default=None,
        description="`automatic` (default): the money is taken when the payment succeeds. "
        "`manual`: a successful payment only authorises it and stops at `requires_capture`; "
        "`POST /v1/payments/{id}/capture` takes it, `POST /v1/payments/{id}/cancel` "
        "releases it (the provider cancels an authorisation left uncaptured for 7 days).",
    )

    connector_account: (
        Annotated[str, StringConstraints(min_length=1, max_length=40, pattern=r"^ca_[0-9a-f]+$")]
        | None
    ) = Field(
        default=None,
        description="Pin the payment to one of your enabled connector accounts (`ca_…`); "
        "without it the payment runs on your default account (your oldest enabled one, else "
        "the platform's Stripe account).",
        examples=["ca_3f9a0c1b2d4e5f60718293a4"],
    )

    payment_methods: (
        dict[
            Annotated[str, StringConstraints(pattern=r"^ca_[0-9a-f]{24}$")],
            Annotated[
                str,
                StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_]+$"),
            ]
            | dict[str, Any],
        ]
        | None
    ) = Field(
        default=None,
        max_length=MAX_PAYMENT_METHODS,
        description="The method to use with each connector account of the route, in that "
        'provider\'s own format: `{"ca_…": "pm_…"}` for a Stripe account, `{"ca_…": '
        '{"type": "scheme", …}}` (Adyen\'s `paymentMethod`) for an Adyen one. Keys must be '
        "your connector accounts. An account of the route with no method here and no "
        "`payment_method` is skipped (the skip is recorded on the payment).",
        examples=[{"ca_3f9a0c1b2d4e5f60718293a4": "pm_card_visa"}],
    )

    def rule_errors(self) -> list[dict[str, str]]:
        """The rules that tie fields together (each names the field to fix): the
        provider's minimum for the currency, ``off_session`` with ``return_url``, and a
        method for at least one account."""
        errors: list[dict[str, str]] = []
        if self.payment_method is None and not self.payment_methods:
            errors.append(
                {
                    "field": "payment_method",
                    "message": "is required unless payment_methods names a method per account",
                }
            )
        minimum = minimum_charge_amount(self.currency)
        if minimum is not None and self.amount < minimum:
            errors.append(
                {
                    "field": "amount",
                    "message": f"must be at least {minimum} (minor units) in "
                    f"{self.currency.upper()}: Stripe's minimum charge amount",
                }
            )
        if self.off_session is False and self.return_url is None:
            errors.append(
                {
                    "field": "return_url",
                    "message": "is required when off_session is false: the customer may be "
                    "asked to authenticate and must be sent back somewhere",
                }
            )
        if self.off_session is True and self.return_url is not None:
            errors.append(
                {
                    "field": "return_url",
                    "message": "must not be sent when off_session is true: no customer is "
                    "present to be redirected",
                }
            )
        return errors

    def fingerprint_body(self) -> dict[str, Any]:
        """What the idempotency fingerprint covers.  The Part 2 fields count only when sent:
        a body without them fingerprints exactly as it did before they existed, so a key
        stored then still replays instead of answering 422."""
        body = self.model_dump(mode="json")
        for name in PART2_OPTIONAL_FIELDS:
            if body.get(name) is None:
                body.pop(name, None)
        if body.get("capture_method") == "automatic":
            body.pop("capture_method")  # the default said out loud is the same request
        return body

    def to_domain(self) -> PaymentRequest:
        return PaymentRequest(
            amount=self.amount,
            currency=self.currency,
            # "": only payment_methods was sent (each account of the route needs its entry).
            payment_method=self.payment_method or "",
            customer_reference=self.customer_reference,
            description=self.description,
            metadata=dict(self.metadata),
            customer=self.customer,
            off_session=self.off_session,
            return_url=self.return_url,
            capture_method=self.capture_method or "automatic",
            connector_account=self.connector_account,
            payment_methods=dict(self.payment_methods or {}),
        )


class FailureOut(BaseModel):
    code: str
    decline_code: str | None
    message: str


class AttemptOut(BaseModel):
    """One connector account a payment was tried at (decision 0086)."""

    connector_account: str = Field(description="`ca_…`, or `platform` for the platform's account.")
    provider: str
    provider_payment_id: str | None = Field(
        description="The provider's payment at that account (null: none was created)."
    )
    status: Literal[
        "processing",
        "requires_action",
        "requires_capture",
        "succeeded",
        "failed",
        "canceled",
        "needs_attention",
    ] = Field(
        description="An attempt that ended in a failover is `failed` (it moved no money); "
        "the last attempt's status is the payment's."
    )
    failure: FailureOut | None
    started_at: str
    ended_at: str | None = Field(description="Null while the attempt is in progress.")


class PaymentOut(BaseModel):
    id: str
    object: Literal["payment"]
    status: Literal[
        "processing",
        "requires_action",
        "requires_capture",
        "succeeded",
        "failed",
        "canceled",
        "needs_attention",
    ]
    amount: int
    currency: str
    # Defaults: a body stored before these fields existed (a payment finished earlier) is
    # served as it was stored, without them.
    capture_method: Literal["automatic", "manual"] = Field(
        default="automatic",
        description="`manual`: authorised first (`requires_capture`), captured on request.",
    )
    amount_capturable: int = Field(
        default=0, description="What a capture may still take (only while `requires_capture`)."
    )
    amount_captured: int = Field(default=0, description="What the provider captured.")
    amount_refunded: int = Field(default=0, description="What succeeded refunds returned.")
    payment_method: str | None = Field(
        description="Null when the request sent only `payment_methods`."
    )
    customer_reference: str | None
    customer: str | None = Field(default=None, description="The provider's customer (`cus_…`).")
    description: str | None
    metadata: dict[str, str]
    idempotency_key: str | None = Field(
        description="Null once the retention window purged the key (the payment stays)."
    )
    provider: str
    connector_account: str | None = Field(
        default=None,
        description="The connector account (`ca_…`) the payment runs on: the one it pinned, "
        "else the first of its route, or the next after a failover; null: the platform's "
        "Stripe account.",
    )
    route: list[str] = Field(
        default_factory=list,
        description="The connector accounts the payment may be tried on, in order, resolved "
        "at accept from your routing rules (`platform`: the platform's Stripe account); the "
        "first is `connector_account`.",
    )
    route_attempts: list[AttemptOut] = Field(
        default_factory=list,
        description="One per connector account tried, in order; the last is the one the "
        "payment runs on now (`connector_account`). A payment moves to the next account of "
        "its `route` only when the last one is proven not to have moved money (a "
        "provider-side decline, or its circuit open before anything was sent); a card "
        "decline fails the payment. Refunds, captures and cancels go to the last attempt's "
        "account. Absent from bodies stored before attempts existed.",
    )
    provider_payment_id: str | None
    failure: FailureOut | None
    next_action: dict[str, Any] | None = Field(
        default=None,
        description="Only while `requires_action`: what the customer must do, "
        '`{"type": "redirect_to_url", "redirect_to_url": {"url", "return_url"}}` or '
        '`{"type": "use_stripe_sdk"}` (Stripe), or `{"type": "adyen_action", "adyen_action": '
        "{…}}` (Adyen's `action`: run it, then send the shopper's result to "
        "`POST /v1/payments/{id}/details`).",
    )
    client_secret: str | None = Field(
        default=None,
        description="Only while `requires_action`: the provider's client secret, for the "
        "merchant's front end to finish the authentication (Stripe.js).",
    )
    attempts: int
    created_at: str
    updated_at: str
    completed_at: str | None
    latest_event_sequence: int = Field(
        description="The `sequence` of the newest merchant event about this payment (0: none "
        "yet). An event whose `sequence` is not above it is already reflected here; it moves "
        "the ETag too (a refund or a dispute changes a finished payment)."
    )


class PaymentList(BaseModel):
    data: list[PaymentOut] = Field(description="Newest first.")
    has_more: bool = Field(
        description="More payments follow in the direction this page was read (older after "
        "starting_after or the first page, newer after ending_before)."
    )


class FieldError(BaseModel):
    field: str
    message: str


class ProblemOut(BaseModel):
    """RFC 9457 problem document (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None
