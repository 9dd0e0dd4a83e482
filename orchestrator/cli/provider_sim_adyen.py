"""``payorch provider-sim --provider adyen``: the Adyen-compatible simulator
(``devtools/adyen_simulator``) behind the same command and fault flags as Stripe's.

Its fault operations are Adyen's (payments | details | capture | cancel | refund | reversal |
technical_cancel | any, and webhook for notifications); ``--webhook-url`` is where
notifications go and ``--hmac-key`` (hex) signs them.
"""

from __future__ import annotations

import binascii
from typing import TYPE_CHECKING

import typer

from orchestrator.cli.devtools_import import import_devtools

if TYPE_CHECKING:
    from devtools.adyen_simulator.config import AdyenSimulatorConfig

PROVIDERS = ("stripe", "adyen")
_MODULE = "devtools.adyen_simulator"
_COMMAND = "provider-sim --provider adyen"


def build_adyen_config(
    *,
    seed: int,
    fault: list[str] | None,
    stall_seconds: float,
    hang_seconds: float,
    notification_url: str | None,
    hmac_key: str | None,
) -> AdyenSimulatorConfig:
    """The Adyen simulator's configuration for the CLI's flags; bad ones are usage errors."""
    simulator = import_devtools(_MODULE, command=_COMMAND)
    rules = []
    for spec in fault or []:
        try:
            rules.append(simulator.parse_fault_spec(spec))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--fault") from exc
    if (notification_url is None) != (hmac_key is None):
        raise typer.BadParameter(
            "give both --webhook-url and --hmac-key, or neither", param_hint="--hmac-key"
        )
    if hmac_key is not None:
        try:
            binascii.unhexlify(hmac_key)
        except (binascii.Error, ValueError) as exc:
            raise typer.BadParameter(
                "an Adyen HMAC key is a hex string", param_hint="--hmac-key"
            ) from exc
    config: AdyenSimulatorConfig = simulator.AdyenSimulatorConfig(
        seed=seed,
        faults=tuple(rules),
        stall_seconds=stall_seconds,
        hang_seconds=hang_seconds,
        notification_url=notification_url,
        hmac_key=hmac_key,
    )
    return config


def serve_adyen(config: AdyenSimulatorConfig, *, host: str, port: int) -> None:
    typer.echo(f"Adyen simulator on http://{host}:{port}/v71 ({len(config.faults)} fault rules)")
    import_devtools(_MODULE, command=_COMMAND).serve(config, host=host, port=port)
