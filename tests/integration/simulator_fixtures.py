"""Fixtures for the simulator contract tests: a real simulator serving HTTP on a free port,
driven through the real ``stripe`` SDK (via ``StripeProvider`` or its ``sdk`` client).

Load with ``pytest_plugins = ["tests.integration.simulator_fixtures"]`` in a test module
(and import helpers from ``simulator_helpers``, never from here: a plugin module imported
before pytest registers it cannot have its asserts rewritten).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.integration.simulator_helpers import (
    SEARCH_LAG_SECONDS,
    SHORT_READ_TIMEOUT_SECONDS,
    STALL_SECONDS,
    make_provider,
)
from tests.replay.stripe_schema import AnswerWatch


@pytest.fixture(scope="module")
def running_simulator() -> Iterator[RunningSimulator]:
    watch = AnswerWatch()
    config = SimulatorConfig(
        stall_seconds=STALL_SECONDS, search_lag_seconds=SEARCH_LAG_SECONDS, answer_observer=watch
    )
    with start_in_thread(config) as simulator:
        yield simulator
    # Every answer these tests saw must be one the real Stripe could send.
    watch.assert_clean()
    assert watch.checked > 0


@pytest.fixture
def simulator(running_simulator: RunningSimulator) -> RunningSimulator:
    """The module's simulator, reset: no intents, keys, money, log or faults."""
    running_simulator.admin.reset()
    return running_simulator


@pytest.fixture
def provider(simulator: RunningSimulator) -> Iterator[StripeProvider]:
    with make_provider(simulator.url) as provider:
        yield provider


@pytest.fixture
def impatient_provider(simulator: RunningSimulator) -> Iterator[StripeProvider]:
    with make_provider(simulator.url, read_timeout=SHORT_READ_TIMEOUT_SECONDS) as provider:
        yield provider
