from __future__ import annotations

from orchestrator.engine.publisher import PublishFailed


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
