"""The provider protocol is provider-neutral: no Stripe word in ``engine/``, ``domain/`` or
``services/`` (docs/decisions/0056-provider-neutral-protocol.md).

Stripe's vocabulary (intent, PaymentIntent, client_secret, the SDK's name) lives in the
Stripe adapter (``orchestrator/providers/stripe_*.py``), the simulator, the cassettes and
the replay tests.  The engine speaks of a *provider payment* (``ProviderPayment``), its id
(``provider_payment_id``) and the protocol's constants (``providers.base``).  A second
provider then adds an adapter, a simulator and a decline table, and nothing here.

Every line of every module is read, comments and docstrings included: a comment that says
"intent" teaches the next reader the wrong word.  The exceptions are listed below, each
with its reason; a new one is a decision, not an accident.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("orchestrator/engine", "orchestrator/domain", "orchestrator/services")
STRIPE_WORDS = re.compile(r"intent|paymentintent|client_secret|stripe", re.IGNORECASE)

# Whole identifiers (matched case-insensitively, as words) that stay, anywhere in the core.
ALLOWED_WORDS = {
    # The contract's recovery point (shared/design.md Part 1: accepted -> intent_created ->
    # provider_settled -> completed), stored on every payment and checked by a constraint.
    "intent_created": "the contract's recovery point, stored",
    # Stored columns, and the keys of the public and ops JSON that show them.
    "rejected_intents": "a stored column and the ops JSON key",
    "client_secret": "a stored column and the payment JSON key merchants read",
}

# Whole files that stay as they are, with the reason.
ALLOWED_FILES = {
    # The accept refuses what the provider would refuse, before anything is stored: these are
    # Stripe's published tables, cited as such.  They become per-provider tables when routing
    # chooses the provider at accept (next wave); until then naming their source is the honest
    # thing.
    "orchestrator/domain/minimums.py": "Stripe's minimum charge amounts, cited",
    "orchestrator/domain/currencies.py": "the currencies Stripe supports, cited",
}

# Exact text allowed in one file only.
ALLOWED_TEXT = {
    # The provider name stored with each payment on the platform's own account (a payment on
    # a connector account stores that account's) and each received event.
    ("orchestrator/services/accept.py", '"provider": "stripe"'),
    ("orchestrator/services/provider_events.py", 'provider: str = "stripe"'),
    # The contract's name for the platform account's circuit (design.md Part 3, "Provider
    # outages"), shown to operators; decision 0082.
    ("orchestrator/domain/circuit.py", 'PLATFORM_CIRCUIT_KEY = "ca_platform_stripe"'),
}


def _offending_lines() -> list[str]:
    allowed_word = re.compile(
        r"\b(" + "|".join(map(re.escape, ALLOWED_WORDS)) + r")\b", re.IGNORECASE
    )
    found = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in ALLOWED_FILES:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                text = allowed_word.sub("", line)
                for file, allowed in ALLOWED_TEXT:
                    if file == name:
                        text = text.replace(allowed, "")
                if STRIPE_WORDS.search(text):
                    found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_engine_domain_and_services_name_no_stripe_concept() -> None:
    offending = _offending_lines()
    assert not offending, (
        "Stripe's words belong in orchestrator/providers/stripe_*.py; the core says "
        "'provider payment' (see the module docstring for the exceptions):\n" + "\n".join(offending)
    )


def test_every_listed_exception_is_still_needed() -> None:
    """An exception nobody needs any more is removed, so the list stays the truth."""
    texts = {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for folder in CHECKED
        for path in (ROOT / folder).rglob("*.py")
    }
    everything = "\n".join(texts.values())
    for word in ALLOWED_WORDS:
        assert re.search(rf"\b{word}\b", everything, re.IGNORECASE), word
    for name in ALLOWED_FILES:
        assert STRIPE_WORDS.search(texts[name]), name
    for name, allowed in ALLOWED_TEXT:
        assert allowed in texts[name], (name, allowed)
