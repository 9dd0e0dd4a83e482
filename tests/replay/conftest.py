"""Replay tests: the real ``stripe`` SDK, through ``StripeProvider``, and Adyen's library,
through ``AdyenProvider``, against recorded HTTP.

Modes (environment variable ``PAYORCH_CASSETTES``):

    unset / "replay"   CI and everyone: play ``cassettes/stripe_adapter/*.yaml`` and
                       ``cassettes/adyen_adapter/*.yaml`` with record mode "none".  The
                       provider points at an unroutable address and every socket connect or
                       DNS lookup raises, so a replay cannot touch a network.
    "simulator"        re-record every cassette against a fresh in-process provider simulator
                       (``make cassettes``).
    "stripe"           re-record against Stripe's test mode with ``STRIPE_TEST_KEY=sk_test_…``
                       (``make cassettes-stripe STRIPE_TEST_KEY=…``).  Scenarios that need an
                       injected fault (409 key in use, 429, 500) are skipped and keep their
                       simulator recording, and the Adyen cassettes are skipped.

Adyen's cassettes (``cassettes/adyen_adapter/*.yaml``, fixture ``adyen_cassette``) are
recorded against a fresh in-process Adyen simulator in "simulator" mode
(``make cassettes-adyen`` records only them), and replayed like Stripe's.

A recording is written to a temporary file and moved over the cassette only when its test
passed, so a failed re-recording never leaves a half cassette behind.  Each cassette stores
(vcrpy metadata) where and when it was recorded and the run tag its record ids were built
from, so replays send byte-identical bodies and idempotency keys.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import stripe
from Adyen.settings import LIB_VERSION as ADYEN_LIBRARY_VERSION

from devtools.adyen_simulator import AdyenSimulatorConfig
from devtools.adyen_simulator import start_in_thread as start_adyen_in_thread
from devtools.simulator import SimulatorConfig, start_in_thread
from orchestrator.providers.adyen_adapter import AdyenProvider
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.replay.adyen_cassette_support import (
    ADYEN_API_KEY,
    ADYEN_CASSETTE_DIR,
    ADYEN_MERCHANT_ACCOUNT,
    AdyenCassette,
    AdyenTarget,
    CassetteEventLog,
    adyen_recorder,
)
from tests.replay.cassette_support import (
    CASSETTE_DIR,
    RECORDING_READ_TIMEOUT_SECONDS,
    UNROUTABLE_API_BASE,
    Cassette,
    SocketDuringReplay,
    Target,
    cassette_mode,
    recorder,
)

# -- the socket guard ------------------------------------------------------------------


@pytest.fixture
def socket_guard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every connect and DNS lookup raise; returns what was attempted."""
    attempts: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def guard(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{what}{args[1:] if what == 'connect' else args}")
            raise SocketDuringReplay(f"replay tried to use the network: {what}{args}")

        return guard

    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    return attempts


# -- where recordings come from --------------------------------------------------------


@pytest.fixture(scope="session")
def target() -> Iterator[Target]:
    mode = cassette_mode()
    if mode == "simulator":
        with start_in_thread(SimulatorConfig(stall_seconds=2.0)) as simulator:
            yield Target(mode, simulator.url, "sk_test_payorch_cassettes", simulator)
    elif mode == "stripe":
        key = os.environ.get("STRIPE_TEST_KEY", "")
        if not key.startswith("sk_test_"):
            # Never record against live mode: these scenarios move (test) money.
            raise pytest.UsageError("PAYORCH_CASSETTES=stripe needs STRIPE_TEST_KEY=sk_test_…")
        yield Target(mode, stripe.DEFAULT_API_BASE, key, None)
    else:
        yield Target(mode, UNROUTABLE_API_BASE, "sk_test_replay_never_sent", None)


_CALL_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Remember whether the test body passed: only a passing recording replaces a cassette."""
    report = yield
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    return report


# -- one cassette per test -------------------------------------------------------------


def _open_cassette(
    request: pytest.FixtureRequest, target: Target, *, needs_faults: bool
) -> Iterator[Cassette]:
    name = request.node.name.removeprefix("test_")
    final = CASSETTE_DIR / f"{name}.yaml"
    # Record ids must differ between scenarios (real Stripe keeps keys for 24 hours).
    scenario = hashlib.sha256(name.encode()).hexdigest()[:8]
    if target.mode == "stripe" and needs_faults:
        pytest.skip("needs an injected fault: keeps its simulator recording")
    if target.mode == "replay" and not final.exists():
        pytest.fail(f"no cassette {final}; record it with `make cassettes`")
    vcr_recorder = recorder(target.mode)
    if target.simulator is not None:
        target.simulator.admin.reset()
    with StripeProvider(
        api_key=target.api_key,
        api_base=target.api_base,
        connect_timeout=5.0,
        read_timeout=RECORDING_READ_TIMEOUT_SECONDS,
    ) as provider:
        if target.mode == "replay":
            request.getfixturevalue("socket_guard")
            with vcr_recorder.use_cassette(final.name, record_mode="none") as recorded:
                run = str(recorded.get_metadata("run", None))
                handle = Cassette(
                    target.mode, provider, recorded, None, run, scenario, target.api_base
                )
                yield handle
                assert recorded.all_played, f"{final.name}: the test skipped recorded requests"
                handle.check_bodies()
            return
        scratch = CASSETTE_DIR / f"{name}.recording.yaml"
        scratch.unlink(missing_ok=True)
        try:
            with vcr_recorder.use_cassette(scratch.name, record_mode="all") as recorded:
                run = f"{target.mode[:3]}{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
                recorded.get_metadata("run", run)
                recorded.get_metadata("source", target.mode)
                recorded.get_metadata("recorded_at", time.strftime("%Y-%m-%dT%H:%M:%SZ"))
                recorded.get_metadata("stripe_python", stripe.VERSION)
                handle = Cassette(
                    target.mode,
                    provider,
                    recorded,
                    target.simulator,
                    run,
                    scenario,
                    target.api_base,
                )
                yield handle
                # A recording is only kept when every answer is one Stripe could send.
                handle.check_bodies()
            if request.node.stash.get(_CALL_PASSED, False):
                scratch.replace(final)
        finally:
            scratch.unlink(missing_ok=True)


@pytest.fixture
def cassette(request: pytest.FixtureRequest, target: Target) -> Iterator[Cassette]:
    """A scenario real Stripe can produce: recordable against the simulator or Stripe."""
    yield from _open_cassette(request, target, needs_faults=False)


@pytest.fixture
def fault_cassette(request: pytest.FixtureRequest, target: Target) -> Iterator[Cassette]:
    """A scenario that needs an injected fault: recordable against the simulator only."""
    yield from _open_cassette(request, target, needs_faults=True)


# -- Adyen: recorded against the Adyen simulator only -----------------------------------


@pytest.fixture(scope="session")
def adyen_target() -> Iterator[AdyenTarget]:
    mode = cassette_mode()
    if mode == "simulator":
        config = AdyenSimulatorConfig(
            stall_seconds=2.0,
            api_keys=(ADYEN_API_KEY,),
            merchant_accounts=(ADYEN_MERCHANT_ACCOUNT,),
        )
        with start_adyen_in_thread(config) as simulator:
            yield AdyenTarget(mode, simulator.url, simulator)
    else:
        yield AdyenTarget(mode, UNROUTABLE_API_BASE, None)


def _open_adyen_cassette(
    request: pytest.FixtureRequest, target: AdyenTarget
) -> Iterator[AdyenCassette]:
    name = request.node.name.removeprefix("test_")
    final = ADYEN_CASSETTE_DIR / f"{name}.yaml"
    scenario = hashlib.sha256(name.encode()).hexdigest()[:8]
    if target.mode == "stripe":
        pytest.skip("an Adyen cassette: recorded against the Adyen simulator only")
    if target.mode == "replay" and not final.exists():
        pytest.fail(f"no cassette {final}; record it with `make cassettes-adyen`")
    vcr_recorder = adyen_recorder()
    if target.simulator is not None:
        target.simulator.admin.reset()
    events = CassetteEventLog()
    provider = AdyenProvider(
        api_key=ADYEN_API_KEY,
        merchant_account=ADYEN_MERCHANT_ACCOUNT,
        api_base=target.api_base,
        connect_timeout=5.0,
        read_timeout=RECORDING_READ_TIMEOUT_SECONDS,
        events=events,
    )
    try:
        if target.mode == "replay":
            request.getfixturevalue("socket_guard")
            with vcr_recorder.use_cassette(final.name, record_mode="none") as recorded:
                run = str(recorded.get_metadata("run", None))
                handle = AdyenCassette(
                    target.mode, provider, recorded, None, run, scenario, target.api_base, events
                )
                yield handle
                assert recorded.all_played, f"{final.name}: the test skipped recorded requests"
                handle.check_bodies()
            return
        scratch = ADYEN_CASSETTE_DIR / f"{name}.recording.yaml"
        scratch.unlink(missing_ok=True)
        try:
            with vcr_recorder.use_cassette(scratch.name, record_mode="all") as recorded:
                # Short: the record id goes into a key of at most 64 characters.
                run = f"sim{time.strftime('%y%m%d%H%M%S', time.gmtime())}"
                recorded.get_metadata("run", run)
                recorded.get_metadata("source", "adyen_simulator")
                recorded.get_metadata("recorded_at", time.strftime("%Y-%m-%dT%H:%M:%SZ"))
                recorded.get_metadata("adyen_python", ADYEN_LIBRARY_VERSION)
                handle = AdyenCassette(
                    target.mode,
                    provider,
                    recorded,
                    target.simulator,
                    run,
                    scenario,
                    target.api_base,
                    events,
                )
                yield handle
                # A recording is only kept when every body is one Adyen could take or send.
                handle.check_bodies()
            if request.node.stash.get(_CALL_PASSED, False):
                scratch.replace(final)
        finally:
            scratch.unlink(missing_ok=True)
    finally:
        provider.close()


@pytest.fixture
def adyen_cassette(
    request: pytest.FixtureRequest, adyen_target: AdyenTarget
) -> Iterator[AdyenCassette]:
    """An Adyen scenario, recorded against the Adyen simulator (faults allowed)."""
    yield from _open_adyen_cassette(request, adyen_target)
