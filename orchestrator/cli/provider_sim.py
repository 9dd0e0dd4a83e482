"""``payorch provider-sim``: the Stripe-compatible provider simulator in the foreground.

Registered by ``orchestrator.cli.main`` as ``app.command("provider-sim")(provider_sim)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.devtools_import import import_devtools
from orchestrator.cli.provider_sim_adyen import PROVIDERS, build_adyen_config, serve_adyen

if TYPE_CHECKING:
    from devtools.simulator.config import SimulatorConfig

# The syntax and the examples live in the command's docstring, in "\b" paragraphs that
# keep their lines; an option's help column is too narrow for them at 80 columns.
FAULT_HELP = "Arm a fault rule; repeatable (syntax and examples above)."


def build_config(
    *,
    seed: int,
    fault: list[str] | None,
    stall_seconds: float,
    hang_seconds: float,
    search_lag_seconds: float,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    refund_settle_seconds: float | None = None,
    processing_settle_seconds: float | None = None,
) -> SimulatorConfig:
    """The simulator configuration for the CLI's flags; a bad ``--fault`` is a usage error."""
    simulator = import_devtools("devtools.simulator", command="provider-sim")
    rules = []
    for spec in fault or []:
        try:
            rules.append(simulator.parse_fault_spec(spec))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--fault") from exc
    if (webhook_url is None) != (webhook_secret is None):
        raise typer.BadParameter(
            "give both --webhook-url and --webhook-secret, or neither", param_hint="--webhook-url"
        )
    if webhook_secret is not None and not webhook_secret.startswith("whsec_"):
        raise typer.BadParameter(
            "a webhook secret starts with whsec_", param_hint="--webhook-secret"
        )
    config: SimulatorConfig = simulator.SimulatorConfig(
        seed=seed,
        faults=tuple(rules),
        stall_seconds=stall_seconds,
        hang_seconds=hang_seconds,
        search_lag_seconds=search_lag_seconds,
        webhook_url=webhook_url,
        webhook_secret=webhook_secret,
        refund_settle_seconds=refund_settle_seconds,
        processing_settle_seconds=processing_settle_seconds,
    )
    return config


def provider_sim(
    port: Annotated[int, typer.Option(help="TCP port to listen on.")] = 12111,
    host: Annotated[str, typer.Option(help="Interface to bind (keep it local).")] = "127.0.0.1",
    seed: Annotated[
        int, typer.Option(help="Seed of the fault RNG: same seed + same requests, same faults.")
    ] = 0,
    fault: Annotated[
        list[str] | None, typer.Option("--fault", help=FAULT_HELP, metavar="OP:MODE[:P][:k=v]")
    ] = None,
    stall_seconds: Annotated[
        float,
        typer.Option(
            help="How long timeout_after_effect holds the answer back; must exceed the "
            "client's read timeout (PAYORCH_PROVIDER_TIMEOUT_SECONDS)."
        ),
    ] = 30.0,
    hang_seconds: Annotated[
        float, typer.Option(help="How long a 'hang' fault holds a request.")
    ] = 3600.0,
    search_lag_seconds: Annotated[
        float,
        typer.Option(help="How far /v1/payment_intents/search lags behind (eventual consistency)."),
    ] = 2.0,
    webhook_url: Annotated[
        str | None,
        typer.Option(help="Deliver every event here as a Stripe-signed webhook (POST)."),
    ] = None,
    webhook_secret: Annotated[
        str | None,
        typer.Option(
            envvar="PAYORCH_SIM_WEBHOOK_SECRET",
            help="The endpoint's signing secret (whsec_...); also PAYORCH_SIM_WEBHOOK_SECRET.",
            show_default=False,
        ),
    ] = None,
    refund_settle_seconds: Annotated[
        float | None,
        typer.Option(
            help="Pending / failing test refunds move on this long after (default: "
            "only via POST /_sim/refunds/{id}/settle)."
        ),
    ] = None,
    processing_settle_seconds: Annotated[
        float | None,
        typer.Option(
            help="Asynchronous test payments settle this long after confirm "
            "(default: only via POST /_sim/payment_intents/{id}/settle)."
        ),
    ] = None,
    provider: Annotated[
        str,
        typer.Option(help="stripe, or adyen: Adyen's Checkout v71 at /v71 (see above)."),
    ] = "stripe",
    hmac_key: Annotated[
        str | None,
        typer.Option(
            envvar="PAYORCH_SIM_ADYEN_HMAC_KEY",
            help="--provider adyen: the notification HMAC key (hex); also "
            "PAYORCH_SIM_ADYEN_HMAC_KEY.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve a Stripe-compatible PaymentIntents API with fault injection.

    Point the SDK at it with PAYORCH_STRIPE_API_BASE=http://HOST:PORT and any
    sk_test_ key.

    \b
    Fault rules, --fault OP:MODE[:PROBABILITY][:key=value...]:
      OP    create confirm retrieve list search capture cancel refund
            retrieve_refund list_refunds list_events retrieve_event any
      MODE  latency timeout_after_effect error_500_before error_500_after
            rate_limit hang
      or OP webhook (deliveries) with MODE drop duplicate reorder delay
      keys  amounts=1313,2000 (only these amounts), times=N (at most N
            times), seconds=S (latency/stall/hang length),
            retry_after=N (rate_limit)

    \b
    Examples:
      payorch provider-sim --fault confirm:timeout_after_effect:0.1
      payorch provider-sim --fault confirm:error_500_after:amounts=1313
      payorch provider-sim --fault any:latency:seconds=0.05
      payorch provider-sim --fault create:rate_limit:0.2:retry_after=2

    Rules can also be changed at run time: GET/POST/DELETE /_sim/faults.

    \b
    Admin API (not Stripe's):
      /_sim/movements /_sim/requests /_sim/faults /_sim/reset /_sim/webhooks
      /_sim/payment_intents/{id}/authenticate|settle
      /_sim/refunds/{id}/settle
      /_sim/dashboard/refunds|disputes

    With --provider adyen: Adyen's Checkout v71 at /v71, faults on payments,
    details, capture, cancel, refund, reversal, technical_cancel, any and webhook;
    --webhook-url and --hmac-key for notifications
    (docs/providers/adyen-simulator.md).
    """
    if provider not in PROVIDERS:
        raise typer.BadParameter(f"one of {', '.join(PROVIDERS)}", param_hint="--provider")
    if provider == "adyen":
        adyen = build_adyen_config(
            seed=seed,
            fault=fault,
            stall_seconds=stall_seconds,
            hang_seconds=hang_seconds,
            notification_url=webhook_url,
            hmac_key=hmac_key,
        )
        serve_adyen(adyen, host=host, port=port)
        return
    config = build_config(
        seed=seed,
        fault=fault,
        stall_seconds=stall_seconds,
        hang_seconds=hang_seconds,
        search_lag_seconds=search_lag_seconds,
        webhook_url=webhook_url,
        webhook_secret=webhook_secret,
        refund_settle_seconds=refund_settle_seconds,
        processing_settle_seconds=processing_settle_seconds,
    )
    typer.echo(f"provider simulator on http://{host}:{port} ({len(config.faults)} fault rules)")
    import_devtools("devtools.simulator", command="provider-sim").serve(
        config, host=host, port=port
    )
