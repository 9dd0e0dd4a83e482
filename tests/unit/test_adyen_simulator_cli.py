"""``payorch provider-sim --provider adyen``: the Adyen simulator behind the same command,
fault flag and webhook URL as Stripe's, with its HMAC key."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from devtools.adyen_simulator.faults import parse_fault_spec
from orchestrator.cli.provider_sim import provider_sim
from orchestrator.cli.provider_sim_adyen import build_adyen_config


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("provider-sim")(provider_sim)
    app.command("noop")(lambda: None)
    return app


def test_the_help_names_the_adyen_provider(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["provider-sim", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for text in ("--provider", "adyen", "--hmac-key"):
        assert text in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--provider", "paypal"],
        ["--provider", "adyen", "--fault", "confirm:timeout_after_effect"],
        ["--provider", "adyen", "--webhook-url", "http://127.0.0.1:9/n"],
        ["--provider", "adyen", "--webhook-url", "http://127.0.0.1:9/n", "--hmac-key", "xyz"],
    ],
)
def test_bad_adyen_flags_are_usage_errors(cli: typer.Typer, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["provider-sim", *args])
    assert result.exit_code == 2, result.output


def test_the_flags_become_the_adyen_configuration() -> None:
    config = build_adyen_config(
        seed=7,
        fault=["payments:timeout_after_effect:times=1", "webhook:duplicate"],
        stall_seconds=3.0,
        hang_seconds=9.0,
        notification_url="http://127.0.0.1:8000/v1/providers/adyen/notifications/ca_1",
        hmac_key="44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
    )
    assert config.seed == 7
    assert config.faults == (
        parse_fault_spec("payments:timeout_after_effect:times=1"),
        parse_fault_spec("webhook:duplicate"),
    )
    assert (config.stall_seconds, config.hang_seconds) == (3.0, 9.0)
    assert config.notification_url is not None and config.notification_url.endswith("/ca_1")
