"""The compose files: safe by default, and valid for the Compose CLI.

Read as data (always): only the API is published on the host; metrics ports and RabbitMQ's
management UI are not; one service builds the one image the others run; the provider
simulator exists only in the ``dev`` profile; production has no fake-provider default.

``docker compose config`` (or Debian's ``docker-compose config``, which needs no Docker
daemon) validates the files as Compose reads them; skipped only when no Compose CLI is
installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DEV_OVERLAY = ROOT / "docker-compose.dev.yml"
PAYORCH_SERVICES = {"migrate", "api", "worker", "sweeper", "relay", "provider-sim"}


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_only_the_api_is_published_on_the_host() -> None:
    services = _load(COMPOSE)["services"]
    published = {name: svc["ports"] for name, svc in services.items() if svc.get("ports")}
    # Jaeger's UI (tracing profile only) on the loopback interface, never on every address.
    assert published == {"api": ["8000:8000"], "jaeger": ["127.0.0.1:16686:16686"]}
    assert "management" not in services["rabbitmq"]["image"]  # no management UI at all


def test_one_service_builds_the_image_the_others_run() -> None:
    services = _load(COMPOSE)["services"]
    production = PAYORCH_SERVICES - {"provider-sim"}
    builders = [name for name, svc in services.items() if "build" in svc]
    assert builders == ["migrate", "provider-sim"]
    assert services["migrate"]["build"] == "."  # the Dockerfile's default target: production
    images = {services[name]["image"] for name in production}
    assert images == {"payorch:latest"}
    assert {services[name].get("pull_policy") for name in production - {"migrate"}} == {"never"}


def test_the_simulator_runs_from_the_dev_stage_never_from_the_production_image() -> None:
    sim = _load(COMPOSE)["services"]["provider-sim"]
    assert sim["image"] == "payorch-dev:latest"
    assert sim["build"] == {"context": ".", "target": "dev"}
    stages = _dockerfile_stages()
    assert "devtools" not in stages["production"]
    assert "devtools" in stages["dev"]
    # The last stage is the default target (`build: .`): the production image.
    assert list(stages)[-1] == "default" and stages["default"] == set()


def test_production_has_no_fake_provider_default_and_the_simulator_is_dev_only() -> None:
    services = _load(COMPOSE)["services"]
    assert services["provider-sim"]["profiles"] == ["dev"]
    for name in PAYORCH_SERVICES:
        env = services[name]["environment"]
        assert env["PAYORCH_ENV"] == "production"
        assert (
            env["PAYORCH_STRIPE_API_BASE"] == "${PAYORCH_STRIPE_API_BASE:-https://api.stripe.com}"
        )
        assert env["PAYORCH_STRIPE_API_KEY"].startswith("${PAYORCH_STRIPE_API_KEY:?")
    dev = _load(DEV_OVERLAY)["services"]
    assert {name for name in dev} == PAYORCH_SERVICES
    assert {svc["environment"]["PAYORCH_STRIPE_API_BASE"] for svc in dev.values()} == {
        "http://provider-sim:12111"
    }


def test_traces_are_off_by_default_and_their_collector_and_jaeger_are_a_profile() -> None:
    services = _load(COMPOSE)["services"]
    assert services["otel-collector"]["profiles"] == ["tracing"]
    assert services["jaeger"]["profiles"] == ["tracing"]
    for name in PAYORCH_SERVICES:
        # Empty unless the operator sets it: the processes then set up no exporter.
        endpoint = services[name]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
        assert endpoint == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
    [mount] = services["otel-collector"]["volumes"]
    source = mount.split(":")[0]
    collector = _load(ROOT / source)
    # OTLP/HTTP in on the port the processes' endpoint names, OTLP out to Jaeger.
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    pipeline = collector["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    [exporter] = pipeline["exporters"]
    assert collector["exporters"][exporter]["endpoint"] == "jaeger:4317"


def test_in_the_dev_setup_the_simulator_signs_webhooks_with_the_secret_the_api_verifies() -> None:
    dev = _load(DEV_OVERLAY)["services"]
    sim, api = dev["provider-sim"], dev["api"]
    assert "--webhook-url" in sim["command"]
    target = sim["command"][sim["command"].index("--webhook-url") + 1]
    assert target == "http://api:8000/v1/providers/stripe/webhooks"
    secret = api["environment"]["PAYORCH_STRIPE_WEBHOOK_SECRET"]
    assert secret.startswith("whsec_")
    assert sim["environment"]["PAYORCH_SIM_WEBHOOK_SECRET"] == secret


def test_each_process_starts_only_once_what_it_checks_at_its_start_is_healthy() -> None:
    """The API, workers, sweeper and relay exit 69 at their start when the database or the
    broker cannot be used (decision 0100); compose must not start them before both are up,
    or every ``up`` would begin with a round of failed starts.  The database is reached
    through ``migrate`` (which waits for PostgreSQL's healthcheck and exits 0 once the
    tables exist); the broker through RabbitMQ's healthcheck."""
    services = _load(COMPOSE)["services"]
    for server in ("postgres", "rabbitmq"):
        assert services[server]["healthcheck"]["test"], server
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    uses_the_broker = {"api", "worker", "sweeper"}
    for name in ("api", "worker", "sweeper", "relay"):
        depends_on = services[name]["depends_on"]
        assert depends_on["migrate"] == {"condition": "service_completed_successfully"}, name
        if name in uses_the_broker:
            assert depends_on["rabbitmq"] == {"condition": "service_healthy"}, name


def test_the_build_context_is_an_allow_list() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"  # everything out (.venv, .git, tests, local databases) ...
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {
        "requirements.lock",
        "pyproject.toml",
        "README.md",
        "orchestrator",
        "workers",
        "devtools",
    }
    copied = set().union(*_dockerfile_stages().values())
    assert copied <= allowed, "the Dockerfile copies something .dockerignore leaves out"


def test_the_image_installs_exactly_the_runtime_lock() -> None:
    """Every pip install in the Dockerfile either takes the hashed runtime lock or adds the
    project without its dependencies: nothing is resolved from pyproject.toml's ranges."""
    installs = [
        line.split("pip install", 1)[1].split("&&")[0].rstrip(" \\").split()
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if "pip install" in line
    ]
    assert ["--require-hashes", "-r", "requirements.lock"] in installs
    for words in installs:
        assert "--require-hashes" in words or "--no-deps" in words, words


def _dockerfile_stages() -> dict[str, set[str]]:
    """What each stage of the Dockerfile copies from the build context, by stage name (an
    unnamed stage is "default")."""
    stages: dict[str, set[str]] = {}
    current: set[str] = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            words = line.split()
            current = stages.setdefault(words[3] if len(words) > 3 else "default", set())
        elif line.startswith("COPY "):
            current.update(part.rstrip("/").removeprefix("./") for part in line.split()[1:-1])
    return stages


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy is not None else None


def _config(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Compose CLI (docker compose or docker-compose) on this machine")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PAYORCH_")}
    environment.update(env)
    return subprocess.run(
        [*cli, "--project-directory", str(ROOT), *args, "config", "-q"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_compose_config_accepts_the_production_stack_with_its_required_variables() -> None:
    result = _config(PAYORCH_SECRET_KEY="x" * 48, PAYORCH_STRIPE_API_KEY="sk_live_example")
    assert result.returncode == 0, result.stderr


def test_compose_config_refuses_the_production_stack_without_a_provider_key() -> None:
    result = _config(PAYORCH_SECRET_KEY="x" * 48)
    assert result.returncode != 0
    assert "PAYORCH_STRIPE_API_KEY" in result.stderr


def test_compose_config_accepts_the_dev_setup() -> None:
    result = _config(
        "-f",
        str(COMPOSE),
        "-f",
        str(DEV_OVERLAY),
        "--profile",
        "dev",
        PAYORCH_SECRET_KEY="dev",
        PAYORCH_STRIPE_API_KEY="unused-in-dev",
    )
    assert result.returncode == 0, result.stderr
