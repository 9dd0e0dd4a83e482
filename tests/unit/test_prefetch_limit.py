"""The threads-pool worker's prefetch count follows the provider's latency: a few messages
beyond the slow calls in progress, at most the pool's concurrency; an idle second teaches
nothing; the consumer step applies the limit on the consumer's timer through kombu's QoS,
keeping Celery's own changes to the count (held ETA tasks)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kombu.common import QoS

from orchestrator.providers.calls_in_progress import CallsInProgress
from workers.prefetch_limit import STEP, AdaptivePrefetch, PrefetchPolicy


def test_a_fast_provider_brings_the_limit_down_to_the_floor() -> None:
    policy = PrefetchPolicy(ceiling=64, floor=8, headroom=1.5)
    assert policy.limit == 64  # starts where a fixed prefetch would
    limits = [
        policy.next_limit(calls_in_progress=0.0, messages_held=policy.limit) for _ in range(7)
    ]
    assert limits == [36, 22, 15, 11, 9, 8, 8]  # half the distance a second
    assert policy.next_limit(calls_in_progress=0.4, messages_held=8) == 9


def test_a_slow_provider_grows_the_limit_to_the_ceiling_within_seconds() -> None:
    policy = PrefetchPolicy(ceiling=64, floor=8, headroom=1.5)
    while policy.limit > 8:
        policy.next_limit(calls_in_progress=0.0, messages_held=64)
    limits = []
    for _ in range(5):
        # At 300 ms a call nearly every message held waits for the provider.
        limits.append(policy.next_limit(calls_in_progress=policy.limit - 0.5, messages_held=0))
    assert limits == [20, 38, 64, 64, 64]


def test_an_idle_second_keeps_the_limit_the_last_busy_one_set() -> None:
    policy = PrefetchPolicy(ceiling=64, floor=8, headroom=1.5)
    policy.next_limit(calls_in_progress=40.0, messages_held=64)
    assert policy.limit == 64
    # No calls because no work: not evidence of a fast provider.
    assert policy.next_limit(calls_in_progress=0.0, messages_held=3) == 64
    # Busy and fast: down it goes.
    assert policy.next_limit(calls_in_progress=0.0, messages_held=40) == 36


def test_a_pool_smaller_than_the_floor_keeps_its_concurrency() -> None:
    policy = PrefetchPolicy(ceiling=4, floor=8)
    assert policy.next_limit(calls_in_progress=0.0, messages_held=4) == 4


class FakeTimer:
    """Records the repeated call; the test runs it, a second at a time."""

    def __init__(self) -> None:
        self.entries: list[tuple[float, Any, tuple[Any, ...]]] = []
        self.cancelled = 0

    def call_repeatedly(self, secs: float, fun: Any, args: tuple[Any, ...] = ()) -> Any:
        self.entries.append((secs, fun, args))
        return self

    def cancel(self) -> None:  # the entry's cancel
        self.cancelled += 1


class FakeConsumer:
    """The parts of Celery's consumer the step touches; the QoS is kombu's own."""

    def __init__(
        self, *, prefetch: int, hub: object | None = object(), conf: dict[str, int] | None = None
    ) -> None:
        self.app = SimpleNamespace(conf=conf or {})
        self.sent: list[int] = []
        self.hub = hub
        self.timer = FakeTimer()
        self.initial_prefetch_count = prefetch
        self.qos = QoS(lambda prefetch_count: self.sent.append(prefetch_count), prefetch)
        self.qos.update()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def started_step(
    consumer: FakeConsumer, meter: CallsInProgress, held: list[int]
) -> AdaptivePrefetch:
    step = AdaptivePrefetch(consumer)
    step.meter = meter
    step.messages_held = lambda: held[0]
    step.start(consumer)
    return step


def test_the_step_sets_the_broker_prefetch_on_the_consumer_timer() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.0)
    consumer = FakeConsumer(prefetch=64)
    held = [64]
    step = started_step(consumer, meter, held)
    [(interval, adjust, args)] = consumer.timer.entries
    assert interval == 1.0
    assert consumer.sent == [64]  # nothing changed yet

    for _ in range(6):  # seconds of a fast provider with a full window
        clock.now += 1.0
        adjust(*args)
    assert consumer.sent == [64, 36, 22, 15, 11, 9, 8]

    tokens: list[int] = []
    for _ in range(3):  # the provider slows down: every message held waits for it
        tokens += [meter.started() for _ in range(step.applied - len(tokens))]
        held[0] = step.applied
        clock.now += 1.0
        adjust(*args)
    assert consumer.sent[-3:] == [20, 38, 64]
    for token in tokens:
        meter.ended(token)
    step.stop(consumer)
    assert consumer.timer.cancelled == 1


def test_the_step_keeps_celerys_own_changes_to_the_count() -> None:
    clock = Clock()
    consumer = FakeConsumer(prefetch=64)
    step = started_step(consumer, CallsInProgress(clock, grace=0.0), [64])
    [(_, adjust, args)] = consumer.timer.entries
    consumer.qos.increment_eventually(3)  # Celery holds three ETA tasks
    clock.now += 1.0
    adjust(*args)
    assert consumer.qos.value == 36 + 3
    assert consumer.sent == [64, 39]
    step.policy.limit = 8  # type: ignore[union-attr]  # as if learned
    step._apply(consumer, 8)
    assert consumer.qos.value == 8 + 3
    step._apply(consumer, 8)  # no change: nothing sent
    assert consumer.sent == [64, 39, 11]
    step.stop(consumer)


def test_without_an_event_loop_the_step_stays_off() -> None:
    consumer = FakeConsumer(prefetch=64, hub=None)
    started_step(consumer, CallsInProgress(Clock(), grace=0.0), [64])
    assert consumer.timer.entries == []
    assert consumer.sent == [64]


def test_a_restarted_consumer_gets_the_learned_limit_at_once() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.0)
    consumer = FakeConsumer(prefetch=64)
    step = started_step(consumer, meter, [64])
    [(_, adjust, args)] = consumer.timer.entries
    clock.now += 1.0
    adjust(*args)
    assert consumer.sent[-1] == 36
    step.stop(consumer)
    # A reconnect: Celery's Tasks step builds a new QoS at the pool's concurrency.
    consumer.qos = QoS(lambda prefetch_count: consumer.sent.append(prefetch_count), 64)
    consumer.qos.update()
    step.start(consumer)
    assert consumer.sent[-1] == 36


def test_the_step_is_named_where_celery_finds_it() -> None:
    from kombu.utils.imports import symbol_by_name

    assert symbol_by_name(STEP) is AdaptivePrefetch
    from orchestrator.broker import ADAPTIVE_PREFETCH_STEP

    assert ADAPTIVE_PREFETCH_STEP == STEP


def test_the_floor_comes_from_the_settings() -> None:
    from orchestrator.broker import PREFETCH_FLOOR_CONF

    clock = Clock()
    consumer = FakeConsumer(prefetch=64, conf={PREFETCH_FLOOR_CONF: 20})
    started_step(consumer, CallsInProgress(clock, grace=0.0), [64])
    [(_, adjust, args)] = consumer.timer.entries
    for _ in range(10):
        clock.now += 1.0
        adjust(*args)
    assert consumer.sent == [64, 42, 31, 25, 22, 21, 20]
