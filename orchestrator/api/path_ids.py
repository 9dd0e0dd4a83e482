"""A path segment that only a payment id matches: ``{payment_id:payment_id}``.

Hazard: a parameterised route swallows the literal paths beside it.  Starlette takes the
first route whose path *and* method match, so ``GET /v1/ops/payments/retry`` reached
``GET /v1/ops/payments/{payment_id}`` as the payment "retry" and answered 404, where the
resource ``/v1/ops/payments/retry`` exists and only takes POST (a 405 with ``Allow``).
A route whose segment can only be a payment id never matches ``retry``.

Starlette keeps convertors in one registry, read when a route is built: the routes that
use this one import it from here, which registers it first.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor

from orchestrator.domain.ids import PAYMENT_ID_PATTERN


class PaymentIdConvertor(Convertor[str]):
    regex = PAYMENT_ID_PATTERN.removeprefix("^").removesuffix("$")

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("payment_id", PaymentIdConvertor())
PAYMENT_ID_SEGMENT = "{payment_id:payment_id}"
