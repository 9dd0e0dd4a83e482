"""The 403 of a key whose role does not reach the route, naming the route it asked for.

An ops key on a merchant route once heard "Payments are created and read with a merchant
key" whatever the route (webhook endpoints, events, refunds, routing): a sentence about
another resource sends the reader looking in the wrong place.  The route's own template
(``/v1/webhook_endpoints/{endpoint_id}``) is named instead: always true, and never an echo
of what the caller typed.
"""

from __future__ import annotations

from starlette.requests import Request

from orchestrator.api.problems import Problem


def route_named(request: Request) -> str:
    """``METHOD /path/{template}`` of the matched route (the raw path when none matched);
    the template as documented, without a convertor (``{payment_id}``, not
    ``{payment_id:payment_id}``)."""
    route = request.scope.get("route")
    path = getattr(route, "path_format", None) or request.url.path
    return f"{request.method} {path}"


def not_a_merchant(request: Request) -> Problem:
    return Problem(
        403,
        "forbidden",
        f"{route_named(request)} needs a merchant API key; this key has the 'ops' role, "
        "which reaches the /v1/ops routes and the console only.",
    )


def not_an_operator(request: Request) -> Problem:
    return Problem(
        403,
        "forbidden",
        f"{route_named(request)} needs an API key with the 'ops' role; this key is a merchant's.",
    )
