"""A merchant's routing configuration: which connector accounts a payment is tried on.

Pure rules only (storage is ``db.repositories.routing``, the use cases
``services.routing``; the contract is design Part 3 "Routing", decisions 0076 and 0077).

Read top to bottom:

1. ``parse_configuration(document)``: the merchant's JSON, checked for shape (conditions,
   ``then`` / ``split`` / ``default``, weights, names), every problem naming its field
   (``rules[2].split``).  ``account_errors`` then checks the accounts it names against the
   merchant's own (unknown, another merchant's, disabled are all refused at ``PUT``).
2. ``evaluate(configuration, facts, payment_id)``: the first rule whose conditions all hold
   wins; a ``split`` picks one of its routes by weight, deterministically from the payment
   id (``split_bucket``: SHA-256, never Python's per-process salted ``hash()``), so the
   same payment routes the same way on every retry, takeover and process; no rule: the
   ``default``.
3. ``usable_route(candidates, usable)``: at accept, accounts disabled since the ``PUT`` or
   without a payment method for this payment are dropped, each drop recorded as a skip.

``PLATFORM_ACCOUNT`` (``"platform"``) names the platform's own provider account (the one a
payment with ``connector_account: null`` runs on; decision 0062) wherever a route lists
accounts: the implicit configuration of a merchant without accounts routes to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.connector_accounts import is_connector_account_id
from orchestrator.domain.currencies import CURRENCY_RULE, supported_currency

PLATFORM_ACCOUNT = "platform"

CONDITION_KEYS: tuple[str, ...] = (
    "currency",
    "amount_gte",
    "amount_lt",
    "capture_method",
    "off_session",
    "metadata",
)
RULE_KEYS: tuple[str, ...] = ("name", "if", "then", "split")
SPLIT_KEYS: tuple[str, ...] = ("weight", "then")
CONFIGURATION_KEYS: tuple[str, ...] = ("rules", "default")
CAPTURE_METHODS: tuple[str, ...] = ("automatic", "manual")

# Bounds that keep a configuration a thing a person reads; evaluation is linear in them.
MAX_RULES = 100
MAX_ROUTE_LENGTH = 10
MAX_SPLITS = 10
MAX_NAME_LENGTH = 100
MAX_METADATA_CONDITIONS = 20

# Why an account of a route was not used for a payment (``Skip.reason``).
SKIP_DISABLED = "disabled"
SKIP_NO_PAYMENT_METHOD = "no_payment_method"


@dataclass(frozen=True)
class Conditions:
    """All optional; all that are set must hold."""

    currency: tuple[str, ...] | None = None
    amount_gte: int | None = None
    amount_lt: int | None = None
    capture_method: str | None = None
    off_session: bool | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def document(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.currency is not None:
            shown["currency"] = list(self.currency)
        if self.amount_gte is not None:
            shown["amount_gte"] = self.amount_gte
        if self.amount_lt is not None:
            shown["amount_lt"] = self.amount_lt
        if self.capture_method is not None:
            shown["capture_method"] = self.capture_method
        if self.off_session is not None:
            shown["off_session"] = self.off_session
        if self.metadata:
            shown["metadata"] = dict(self.metadata)
        return shown


@dataclass(frozen=True)
class Split:
    weight: int
    then: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    """Exactly one of ``then`` and ``split`` is set."""

    name: str
    conditions: Conditions
    then: tuple[str, ...] | None = None
    split: tuple[Split, ...] | None = None

    def document(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"name": self.name, "if": self.conditions.document()}
        if self.split is not None:
            shown["split"] = [{"weight": s.weight, "then": list(s.then)} for s in self.split]
        else:
            shown["then"] = list(self.then or ())
        return shown

    def accounts(self) -> tuple[str, ...]:
        if self.split is not None:
            return tuple(a for s in self.split for a in s.then)
        return self.then or ()


@dataclass(frozen=True)
class RoutingConfiguration:
    rules: tuple[Rule, ...]
    default: tuple[str, ...]

    def document(self) -> dict[str, Any]:
        return {"rules": [r.document() for r in self.rules], "default": list(self.default)}

    def accounts(self) -> tuple[str, ...]:
        """Every account named, in order of first mention."""
        seen: dict[str, None] = {}
        for rule in self.rules:
            seen.update(dict.fromkeys(rule.accounts()))
        seen.update(dict.fromkeys(self.default))
        return tuple(seen)


def implicit_configuration(default_account_id: str | None) -> RoutingConfiguration:
    """What a merchant that never sent a configuration routes by: no rules, and its
    default account (decision 0062), else the platform's."""
    return RoutingConfiguration(rules=(), default=(default_account_id or PLATFORM_ACCOUNT,))


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def document(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class InvalidConfiguration(Exception):
    """Every problem found, each naming its field."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in errors))
        self.errors = tuple(errors)


# 1. Parsing ------------------------------------------------------------------------------


class _Errors:
    def __init__(self) -> None:
        self.found: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.found.append(FieldError(path, message))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unknown_keys(
    given: Mapping[str, Any], known: Sequence[str], path: str, errors: _Errors
) -> None:
    for key in given:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            errors.add(where, f"is not a known field (known: {', '.join(known)})")


def _route(value: Any, path: str, errors: _Errors) -> tuple[str, ...]:
    if not isinstance(value, list):
        errors.add(path, "must be a list of connector account ids")
        return ()
    if not value:
        errors.add(path, "must name at least one connector account")
        return ()
    if len(value) > MAX_ROUTE_LENGTH:
        errors.add(path, f"may name at most {MAX_ROUTE_LENGTH} accounts")
    route: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not (
            item == PLATFORM_ACCOUNT or is_connector_account_id(item)
        ):
            errors.add(
                f"{path}[{index}]", f"must be a connector account id (ca_…) or {PLATFORM_ACCOUNT!r}"
            )
            continue
        if item in route:
            errors.add(f"{path}[{index}]", f"names {item} twice: a route tries each account once")
            continue
        route.append(item)
    return tuple(route)


def _conditions(value: Any, path: str, errors: _Errors) -> Conditions:
    if value is None:
        return Conditions()
    if not isinstance(value, dict):
        errors.add(path, "must be an object of conditions")
        return Conditions()
    _unknown_keys(value, CONDITION_KEYS, path, errors)
    currency: tuple[str, ...] | None = None
    if "currency" in value:
        given = value["currency"]
        if not isinstance(given, list) or not given:
            errors.add(f"{path}.currency", f"must be a non-empty list; each {CURRENCY_RULE}")
        else:
            # The shape only: stored configurations are read by this parser too, so which
            # codes are accepted is ``currency_errors``' question, asked at PUT.
            malformed = [
                index
                for index, code in enumerate(given)
                if not (isinstance(code, str) and len(code) == 3 and code.isascii())
            ]
            for index in malformed:
                errors.add(f"{path}.currency[{index}]", CURRENCY_RULE)
            if not malformed:
                currency = tuple(c.lower() for c in given)
    bounds: dict[str, int | None] = {"amount_gte": None, "amount_lt": None}
    for key in bounds:
        if key in value:
            if not _is_int(value[key]) or value[key] < 0:
                errors.add(f"{path}.{key}", "must be a non-negative integer (minor units)")
            else:
                bounds[key] = value[key]
    low, high = bounds["amount_gte"], bounds["amount_lt"]
    if low is not None and high is not None and low >= high:
        errors.add(f"{path}.amount_lt", "must be greater than amount_gte: no amount could match")
    capture_method = value.get("capture_method")
    if capture_method is not None and capture_method not in CAPTURE_METHODS:
        errors.add(f"{path}.capture_method", f"must be one of: {', '.join(CAPTURE_METHODS)}")
        capture_method = None
    off_session = value.get("off_session")
    if "off_session" in value and not isinstance(off_session, bool):
        errors.add(f"{path}.off_session", "must be true or false")
        off_session = None
    metadata: tuple[tuple[str, str], ...] = ()
    if "metadata" in value:
        given = value["metadata"]
        if (
            not isinstance(given, dict)
            or not given
            or len(given) > MAX_METADATA_CONDITIONS
            or not all(isinstance(v, str) for v in given.values())
        ):
            errors.add(
                f"{path}.metadata",
                f"must be an object of 1-{MAX_METADATA_CONDITIONS} string values (equality "
                "on each key)",
            )
        else:
            metadata = tuple(sorted((str(k), v) for k, v in given.items()))
    return Conditions(
        currency=currency,
        amount_gte=low,
        amount_lt=high,
        capture_method=capture_method,
        off_session=off_session,
        metadata=metadata,
    )


def _split(value: Any, path: str, errors: _Errors) -> tuple[Split, ...]:
    if not isinstance(value, list) or not value:
        errors.add(path, "must be a non-empty list of {weight, then}")
        return ()
    if len(value) > MAX_SPLITS:
        errors.add(path, f"may have at most {MAX_SPLITS} parts")
    parts: list[Split] = []
    total = 0
    weights_valid = True
    for index, part in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(part, dict):
            errors.add(where, "must be an object {weight, then}")
            continue
        _unknown_keys(part, SPLIT_KEYS, where, errors)
        given = part.get("weight")
        weight = given if isinstance(given, int) and _is_int(given) else 0
        if not 1 <= weight <= 100:
            errors.add(f"{where}.weight", "must be an integer from 1 to 100")
            weights_valid = False
        total += weight
        parts.append(Split(weight, _route(part.get("then"), f"{where}.then", errors)))
    # The sum is named only when every weight is one: a bad weight is the field to fix.
    if weights_valid and len(parts) == len(value) and total != 100:
        errors.add(path, f"weights must sum to 100 (they sum to {total})")
    return tuple(parts)


def _rule(value: Any, path: str, errors: _Errors) -> Rule | None:
    if not isinstance(value, dict):
        errors.add(path, "must be an object {name, if, then | split}")
        return None
    _unknown_keys(value, RULE_KEYS, path, errors)
    name = value.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        errors.add(f"{path}.name", f"must be 1-{MAX_NAME_LENGTH} characters")
        name = ""
    elif any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        errors.add(f"{path}.name", "must not contain control characters")
    conditions = _conditions(value.get("if"), f"{path}.if", errors)
    has_then, has_split = "then" in value, "split" in value
    if has_then == has_split:
        errors.add(path, "must have exactly one of then (a route) and split (weighted routes)")
        return None
    if has_split:
        return Rule(name, conditions, split=_split(value["split"], f"{path}.split", errors))
    return Rule(name, conditions, then=_route(value["then"], f"{path}.then", errors))


def parse_configuration(document: Any) -> RoutingConfiguration:
    """The configuration a ``PUT`` sent, or ``InvalidConfiguration`` listing every
    problem of shape.  Accounts are checked by ``account_errors``."""
    errors = _Errors()
    if not isinstance(document, dict):
        raise InvalidConfiguration([FieldError("body", "must be an object {rules, default}")])
    _unknown_keys(document, CONFIGURATION_KEYS, "", errors)
    given_rules = document.get("rules", [])
    rules: list[Rule] = []
    if not isinstance(given_rules, list):
        errors.add("rules", "must be a list of rules")
    elif len(given_rules) > MAX_RULES:
        errors.add("rules", f"may have at most {MAX_RULES} rules")
    else:
        names: dict[str, int] = {}
        for index, given in enumerate(given_rules):
            rule = _rule(given, f"rules[{index}]", errors)
            if rule is None:
                continue
            if rule.name and rule.name in names:
                errors.add(
                    f"rules[{index}].name",
                    f"{rule.name!r} is also the name of rules[{names[rule.name]}]: names "
                    "identify the rule a payment matched",
                )
            names.setdefault(rule.name, index)
            rules.append(rule)
    if "default" not in document:
        errors.add("default", "is required: the route of a payment no rule matches")
        default: tuple[str, ...] = ()
    else:
        default = _route(document["default"], "default", errors)
    if errors.found:
        raise InvalidConfiguration(errors.found)
    return RoutingConfiguration(tuple(rules), default)


def _account_paths(configuration: RoutingConfiguration) -> list[tuple[str, str]]:
    """(field, account) for every account named, in document order."""
    paths: list[tuple[str, str]] = []
    for r_index, rule in enumerate(configuration.rules):
        if rule.split is not None:
            for s_index, part in enumerate(rule.split):
                base = f"rules[{r_index}].split[{s_index}].then"
                paths.extend((f"{base}[{i}]", a) for i, a in enumerate(part.then))
        else:
            base = f"rules[{r_index}].then"
            paths.extend((f"{base}[{i}]", a) for i, a in enumerate(rule.then or ()))
    paths.extend((f"default[{i}]", a) for i, a in enumerate(configuration.default))
    return paths


def currency_errors(configuration: RoutingConfiguration) -> list[FieldError]:
    """Every rule's currency that no payment may have (``domain.currencies``), so the rule
    could never match: asked at PUT, like ``account_errors``, not of configurations
    already stored."""
    errors: list[FieldError] = []
    for r_index, rule in enumerate(configuration.rules):
        for c_index, code in enumerate(rule.conditions.currency or ()):
            if supported_currency(code) is None:
                errors.append(FieldError(f"rules[{r_index}].if.currency[{c_index}]", CURRENCY_RULE))
    return errors


def account_errors(
    configuration: RoutingConfiguration, enabled_of: Mapping[str, bool]
) -> list[FieldError]:
    """``enabled_of``: the merchant's own accounts, id -> enabled.  Another merchant's
    account is answered as unknown: a merchant learns nothing of others' ids."""
    errors: list[FieldError] = []
    for path, account in _account_paths(configuration):
        if account == PLATFORM_ACCOUNT:
            continue
        if account not in enabled_of:
            errors.append(FieldError(path, f"{account} is not one of your connector accounts"))
        elif not enabled_of[account]:
            errors.append(FieldError(path, f"{account} is disabled: enable another or remove it"))
    return errors


# 2. Evaluation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PaymentFacts:
    """What conditions look at."""

    amount: int
    currency: str
    capture_method: str = "automatic"
    off_session: bool | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


def matches(conditions: Conditions, facts: PaymentFacts) -> bool:
    if conditions.currency is not None and facts.currency.lower() not in conditions.currency:
        return False
    if conditions.amount_gte is not None and facts.amount < conditions.amount_gte:
        return False
    if conditions.amount_lt is not None and facts.amount >= conditions.amount_lt:
        return False
    if conditions.capture_method is not None and facts.capture_method != conditions.capture_method:
        return False
    # off_session not sent (None) is an on-session payment for a rule that asks.
    if conditions.off_session is not None and bool(facts.off_session) != conditions.off_session:
        return False
    return all(facts.metadata.get(key) == value for key, value in conditions.metadata)


def split_bucket(payment_id: str) -> int:
    """0-99, the same for a payment id on every machine and process: the first 8 bytes of
    SHA-256 of the id.  Hazard: Python's ``hash()`` of a str is salted per process
    (PYTHONHASHSEED), so two workers (or a takeover) would route one payment two ways."""
    digest = hashlib.sha256(payment_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 100


def pick_split(parts: Sequence[Split], payment_id: str) -> Split:
    """The part whose cumulative weight band holds the payment's bucket (weights sum to
    100, so every bucket falls in exactly one band)."""
    bucket = split_bucket(payment_id)
    ceiling = 0
    for part in parts:
        ceiling += part.weight
        if bucket < ceiling:
            return part
    return parts[-1]


@dataclass(frozen=True)
class Evaluation:
    """The candidate route and the rule that chose it (None: the default)."""

    route: tuple[str, ...]
    rule: str | None


def evaluate(
    configuration: RoutingConfiguration, facts: PaymentFacts, payment_id: str
) -> Evaluation:
    for rule in configuration.rules:
        if not matches(rule.conditions, facts):
            continue
        if rule.split is not None:
            return Evaluation(pick_split(rule.split, payment_id).then, rule.name)
        return Evaluation(rule.then or (), rule.name)
    return Evaluation(configuration.default, None)


# 3. At accept ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Skip:
    connector_account: str
    reason: str

    def document(self) -> dict[str, str]:
        return {"connector_account": self.connector_account, "reason": self.reason}


@dataclass(frozen=True)
class ResolvedRoute:
    route: tuple[str, ...]
    skipped: tuple[Skip, ...]


def usable_route(
    candidates: Sequence[str], unusable_reason: Callable[[str], str | None]
) -> ResolvedRoute:
    """The candidates in order, without those ``unusable_reason`` names a reason for."""
    route: list[str] = []
    skipped: list[Skip] = []
    for account in candidates:
        reason = unusable_reason(account)
        if reason is None:
            route.append(account)
        else:
            skipped.append(Skip(account, reason))
    return ResolvedRoute(tuple(route), tuple(skipped))


def account_id_of(route_entry: str) -> str | None:
    """A route's entry as a payment's ``connector_account_id`` (None: the platform's)."""
    return None if route_entry == PLATFORM_ACCOUNT else route_entry
