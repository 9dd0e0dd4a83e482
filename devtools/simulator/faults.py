"""Fault injection: rules, their text syntax, and the seeded book that decides per request.

A rule names an operation, a mode and when it fires::

    OP:MODE[:PROBABILITY][:key=value ...]

    OP           create | confirm | retrieve | list | search | capture | cancel | refund |
                 retrieve_refund | list_refunds | list_balance_transactions | list_events |
                 retrieve_event | any
                 webhook (delivery of events; its own modes, below, and never matched by any)
    MODE         latency               sleep ``seconds``, then proceed normally (on a POST the
                                       idempotency key is held meanwhile, so a concurrent
                                       request with the same key gets 409)
                 timeout_after_effect  do the work and save the answer under the key, then
                                       hold the answer back ``seconds`` (default: the
                                       simulator's stall_seconds, longer than a client timeout)
                 error_500_before      answer 500 api_error; nothing done, nothing saved, so
                                       the same key may be retried and will execute
                 error_500_after       do the work, save a 500 under the key (as Stripe does:
                                       it replays forever) and answer 500
                 rate_limit            answer 429 rate_limit with ``Retry-After: retry_after``;
                                       nothing done, nothing saved
                 hang                  never answer in practice (``seconds``, default the
                                       simulator's hang_seconds); nothing done
    webhook modes  drop | duplicate | reorder | delay (``seconds``, default 1): see webhooks.py
    PROBABILITY  0..1, default 1 (also ``p=0.1``)
    keys         amounts=1313,2000   only for requests about these amounts (create: the
                                     amount sent; refund: the amount sent, else the intent's;
                                     confirm/capture/cancel/retrieve: the intent's amount)
                 times=N             fire at most N times, then the rule is spent
                 seconds=S           duration for latency / timeout_after_effect / hang
                 retry_after=N       Retry-After seconds for rate_limit (default 1)

Examples: ``confirm:timeout_after_effect:0.1``, ``confirm:error_500_after:amounts=1313``,
``any:latency:seconds=0.05``, ``create:rate_limit:0.2:retry_after=2``, ``confirm:hang:times=1``.

Rules are tried in the order they were added; the first that fires decides the request (one
fault per request).  Probabilities draw from one ``random.Random(seed)``, so the same seed and
the same request sequence inject the same faults.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, get_args

Operation = Literal[
    "create",
    "confirm",
    "retrieve",
    "list",
    "search",
    "capture",
    "cancel",
    "refund",
    "retrieve_refund",
    "list_refunds",
    "list_balance_transactions",
    "list_events",
    "retrieve_event",
    "webhook",
]
RuleOperation = Literal[
    "create",
    "confirm",
    "retrieve",
    "list",
    "search",
    "capture",
    "cancel",
    "refund",
    "retrieve_refund",
    "list_refunds",
    "list_balance_transactions",
    "list_events",
    "retrieve_event",
    "webhook",
    "any",
]
FaultMode = Literal[
    "latency",
    "timeout_after_effect",
    "error_500_before",
    "error_500_after",
    "rate_limit",
    "hang",
    "drop",
    "duplicate",
    "reorder",
    "delay",
]
WEBHOOK_MODES = ("drop", "duplicate", "reorder", "delay")

OPERATIONS: tuple[str, ...] = get_args(RuleOperation)
MODES: tuple[str, ...] = get_args(FaultMode)


@dataclass(frozen=True)
class FaultRule:
    operation: RuleOperation
    mode: FaultMode
    probability: float = 1.0
    amounts: frozenset[int] | None = None
    times: int | None = None
    seconds: float | None = None
    retry_after: int = 1

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"unknown operation {self.operation!r}; one of {OPERATIONS}")
        if self.mode not in MODES:
            raise ValueError(f"unknown fault mode {self.mode!r}; one of {MODES}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within 0..1, got {self.probability}")
        if self.times is not None and self.times < 1:
            raise ValueError(f"times must be >= 1, got {self.times}")
        if (self.operation == "webhook") != (self.mode in WEBHOOK_MODES):
            raise ValueError(
                f"{self.operation}:{self.mode}: webhook takes {'|'.join(WEBHOOK_MODES)} only, "
                "and those modes apply to webhook only"
            )
        if self.mode == "latency" and self.seconds is None:
            raise ValueError("a latency fault needs seconds=S")
        if self.seconds is not None and self.seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds}")
        if self.retry_after < 0:
            raise ValueError(f"retry_after must be >= 0, got {self.retry_after}")

    def to_spec(self) -> str:
        parts: list[str] = [self.operation, self.mode]
        if self.probability != 1.0:
            parts.append(repr(self.probability))
        if self.amounts is not None:
            parts.append("amounts=" + ",".join(str(a) for a in sorted(self.amounts)))
        if self.times is not None:
            parts.append(f"times={self.times}")
        if self.seconds is not None:
            parts.append(f"seconds={self.seconds!r}")
        if self.mode == "rate_limit":
            parts.append(f"retry_after={self.retry_after}")
        return ":".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "mode": self.mode,
            "probability": self.probability,
            "amounts": sorted(self.amounts) if self.amounts is not None else None,
            "times": self.times,
            "seconds": self.seconds,
            "retry_after": self.retry_after,
            "spec": self.to_spec(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FaultRule:
        """A rule from the admin API: ``{"spec": "..."}`` or the fields of ``to_json``."""
        if "spec" in data and "mode" not in data:
            return parse_fault_spec(str(data["spec"]))
        known = {"operation", "mode", "probability", "amounts", "times", "seconds"}
        unknown = set(data) - known - {"retry_after", "spec"}
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}")
        try:
            amounts = data.get("amounts")
            return cls(
                operation=cast(RuleOperation, str(data.get("operation", "any"))),
                mode=cast(FaultMode, str(data["mode"])),
                probability=float(data.get("probability", 1.0)),
                amounts=frozenset(int(a) for a in amounts) if amounts is not None else None,
                times=int(data["times"]) if data.get("times") is not None else None,
                seconds=float(data["seconds"]) if data.get("seconds") is not None else None,
                retry_after=int(data.get("retry_after", 1)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"invalid fault rule {data!r}: {exc}") from exc


def parse_fault_spec(spec: str) -> FaultRule:
    """``OP:MODE[:PROBABILITY][:key=value ...]`` (see the module docstring)."""
    fields = [f.strip() for f in spec.strip().split(":")]
    if len(fields) < 2 or not all(fields):
        raise ValueError(f"fault {spec!r} is not OP:MODE[:PROBABILITY][:key=value ...]")
    operation, mode, *rest = fields
    values: dict[str, Any] = {"operation": operation, "mode": mode}
    for position, item in enumerate(rest):
        key, sep, value = item.partition("=")
        if not sep:
            if position != 0:
                raise ValueError(f"fault {spec!r}: {item!r} is not key=value")
            key, value = "probability", item
        try:
            if key in ("p", "probability"):
                values["probability"] = float(value)
            elif key in ("amount", "amounts"):
                values["amounts"] = [int(a) for a in value.replace("|", ",").split(",") if a]
            elif key == "times":
                values["times"] = int(value)
            elif key == "seconds":
                values["seconds"] = float(value)
            elif key == "retry_after":
                values["retry_after"] = int(value)
            else:
                raise ValueError(f"fault {spec!r}: unknown key {key!r}")
        except ValueError as exc:
            if "unknown key" in str(exc):
                raise
            raise ValueError(f"fault {spec!r}: bad value for {key!r}: {value!r}") from exc
    return FaultRule.from_json(values)


@dataclass
class ArmedRule:
    """A rule in the book, with its id and how often it has fired."""

    id: int
    rule: FaultRule
    fired: int = 0

    @property
    def spent(self) -> bool:
        return self.rule.times is not None and self.fired >= self.rule.times

    def to_json(self) -> dict[str, Any]:
        remaining = None if self.rule.times is None else max(self.rule.times - self.fired, 0)
        return {"id": self.id, **self.rule.to_json(), "fired": self.fired, "remaining": remaining}


@dataclass(frozen=True)
class Fault:
    """The fault chosen for one request."""

    rule_id: int
    mode: FaultMode
    seconds: float | None
    retry_after: int


@dataclass
class FaultBook:
    """The rules in force; thread-safe (the admin API and requests share it)."""

    seed: int = 0
    _rules: list[ArmedRule] = field(default_factory=list)
    _next_id: int = 1
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add(self, rule: FaultRule) -> ArmedRule:
        with self._lock:
            armed = ArmedRule(id=self._next_id, rule=rule)
            self._next_id += 1
            self._rules.append(armed)
            return replace(armed)

    def remove(self, rule_id: int) -> bool:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            return len(self._rules) != before

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def reseed(self, seed: int) -> None:
        with self._lock:
            self.seed = seed
            self._rng = random.Random(seed)

    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.to_json() for r in self._rules]

    def pick(self, operation: Operation, amount: int | None) -> Fault | None:
        if not self._rules:
            return None
        with self._lock:
            for armed in self._rules:
                rule = armed.rule
                if armed.spent or rule.operation not in ("any", operation):
                    continue
                if (operation == "webhook") != (rule.operation == "webhook"):
                    continue  # "any" means any API request, never a webhook delivery
                if rule.amounts is not None and amount not in rule.amounts:
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                armed.fired += 1
                return Fault(armed.id, rule.mode, rule.seconds, rule.retry_after)
        return None
