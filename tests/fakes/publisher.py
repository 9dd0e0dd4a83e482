from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engine.publisher import BatchPublishFailed, PublishFailed


class RecordingPublisher:
    """Remembers what would have been published; can be told to fail like a dead broker."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.published: list[tuple[str, int]] = []

    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        if self.fail:
            raise PublishFailed("broker unreachable (fake)")
        self.published.append((payment_id, lease_token))

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        # Operation ids (rfd_…, cap_…, cnl_…) never collide with payment ids (pay_…).
        self.publish_process_payment(operation_id, lease_token)

    def broker_reachable(self) -> bool:
        return not self.fail


class RecordingBatchPublisher(RecordingPublisher):
    """A publisher that confirms payments' wake-ups in batches, as the Celery publisher
    does (``BatchTaskPublisher``); ``confirm_only`` makes the next batch fail after that
    many of its wake-ups were confirmed, like a broker that went away mid-batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[tuple[str, int]]] = []
        self.confirm_only: int | None = None
        self.closed = 0

    def publish_process_payments(self, wakeups: Sequence[tuple[str, int]]) -> None:
        if self.confirm_only is not None:
            confirmed, self.confirm_only = self.confirm_only, None
            self.batches.append(list(wakeups[:confirmed]))
            self.published.extend(wakeups[:confirmed])
            raise BatchPublishFailed("broker went away mid-batch (fake)", confirmed)
        self.batches.append(list(wakeups))
        self.published.extend(wakeups)

    def close_batches(self) -> None:
        self.closed += 1
