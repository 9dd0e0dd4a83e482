"""``payorch provider-sim``: its flags and their fault syntax (registered here on a throwaway
Typer app, as ``orchestrator.cli.main`` registers it)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from devtools.simulator.faults import parse_fault_spec
from orchestrator.cli.provider_sim import build_config, provider_sim


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("provider-sim")(provider_sim)
    app.command("noop")(lambda: None)  # two commands, so "provider-sim" is a subcommand
    return app


def test_the_help_documents_the_fault_syntax(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["provider-sim", "--help"], env={"COLUMNS": "200"})

    assert result.exit_code == 0
    for text in ("--fault", "OP:MODE", "timeout_after_effect", "--seed", "--stall-seconds"):
        assert text in result.output


def test_a_malformed_fault_is_a_usage_error(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["provider-sim", "--fault", "confirm:explode"])

    assert result.exit_code == 2


def test_the_flags_become_the_simulator_configuration() -> None:
    config = build_config(
        seed=42,
        fault=["confirm:timeout_after_effect:0.1", "create:rate_limit:retry_after=2"],
        stall_seconds=12.0,
        hang_seconds=60.0,
        search_lag_seconds=0.5,
    )

    assert config.seed == 42
    assert config.faults == (
        parse_fault_spec("confirm:timeout_after_effect:0.1"),
        parse_fault_spec("create:rate_limit:retry_after=2"),
    )
    assert (config.stall_seconds, config.hang_seconds, config.search_lag_seconds) == (12, 60, 0.5)


def test_webhook_delivery_is_configured_by_url_and_secret_together() -> None:
    common = {"seed": 0, "fault": None, "stall_seconds": 1.0, "hang_seconds": 1.0}
    config = build_config(
        **common,
        search_lag_seconds=1.0,
        webhook_url="http://127.0.0.1:8000/v1/providers/stripe/webhooks",
        webhook_secret="whsec_local",
        refund_settle_seconds=2.0,
        processing_settle_seconds=3.0,
    )

    assert config.webhook_url == "http://127.0.0.1:8000/v1/providers/stripe/webhooks"
    assert config.webhook_secret == "whsec_local"
    assert (config.refund_settle_seconds, config.processing_settle_seconds) == (2.0, 3.0)
    for url, secret in (("http://x", None), (None, "whsec_x"), ("http://x", "not-a-secret")):
        with pytest.raises(typer.BadParameter):
            build_config(**common, search_lag_seconds=1.0, webhook_url=url, webhook_secret=secret)
