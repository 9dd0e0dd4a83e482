"""The schema, as SQLAlchemy Core tables.  Alembic migrations create it; a test proves the
migrations and these definitions agree."""

from __future__ import annotations

import sqlalchemy as sa

from orchestrator.db.types import JsonDocument, UtcDateTime

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

api_clients = sa.Table(
    "api_clients",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("revoked_at", UtcDateTime(), nullable=True),
    # The merchant's default connector account (migration 0018; decision 0062): its oldest
    # enabled one, kept by services.connector_accounts in the transaction that creates or
    # disables an account.  NULL: the platform's Stripe account.  Read by the accept's
    # statement with the client's row, so the default costs the hot path nothing.
    sa.Column("default_connector_account_id", sa.String(40), nullable=True),
    # The version of the merchant's routing configuration (migration 0020; decision 0076),
    # kept by services.routing in the transaction that stores it.  NULL: none was ever
    # sent, and the accept's one statement may claim for this merchant (no routing read).
    sa.Column("routing_version", sa.Integer, nullable=True),
)

# A client's API keys (migration 0019; decision 0079): several at once, so a key is rotated
# by adding the new one and revoking the old one when the merchant has switched.
api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("client_id", sa.String(40), sa.ForeignKey("api_clients.id"), nullable=False),
    # SHA-256 of the whole key: the key has 256 random bits, so a slow hash adds nothing.
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("key_prefix", sa.String(24), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("revoked_at", UtcDateTime(), nullable=True),
    sa.Index("ix_api_keys_client_id", "client_id"),
)

payments = sa.Table(
    "payments",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("client_id", sa.String(40), sa.ForeignKey("api_clients.id"), nullable=False),
    # Idempotency data: NULL once the retention window purged it (the payment stays).
    sa.Column("idempotency_key", sa.String(255), nullable=True),
    sa.Column("request_fingerprint", sa.String(64), nullable=True),
    sa.Column("response_body", JsonDocument, nullable=True),
    # The answers as sent, byte for byte (UTF-8 text, never re-serialised): JSONB above
    # reorders keys, so replays and ETags are served from these.  See migration 0003.
    sa.Column("accepted_response", sa.Text, nullable=True),
    sa.Column("final_response", sa.Text, nullable=True),
    sa.Column("key_purged_at", UtcDateTime(), nullable=True),
    # The request.
    sa.Column("amount", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("payment_method", sa.String(255), nullable=False),
    sa.Column("customer_reference", sa.String(255), nullable=True),
    sa.Column("description", sa.String(1000), nullable=True),
    sa.Column("metadata", JsonDocument, nullable=False),
    # Part 2 request fields (migration 0008): the provider's customer, merchant-initiated
    # (off-session) or not (NULL: not said), and where a 3-D Secure redirect returns.
    sa.Column("customer", sa.String(255), nullable=True),
    sa.Column("off_session", sa.Boolean, nullable=True),
    sa.Column("return_url", sa.String(2048), nullable=True),
    # Manual capture (migration 0013): ``manual`` stops a successful confirm at
    # ``requires_capture``; amount_capturable is what a capture may still take.
    sa.Column("capture_method", sa.String(10), nullable=False, server_default="automatic"),
    sa.Column("amount_capturable", sa.BigInteger, nullable=False, server_default="0"),
    # State machine and lease.
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("recovery_point", sa.String(20), nullable=False),
    sa.Column("lease_token", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(200), nullable=True),
    sa.Column("locked_until", UtcDateTime(), nullable=True),
    sa.Column("next_attempt_at", UtcDateTime(), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("unknown_outcomes", sa.Integer, nullable=False),
    sa.Column("confirm_attempts", sa.Integer, nullable=False),
    # Provider.
    sa.Column("provider", sa.String(20), nullable=False),
    # The connector account the payment runs on (migration 0018), set at accept: the one it
    # pins, else the merchant's default.  NULL: the platform's Stripe account.
    sa.Column("connector_account_id", sa.String(40), nullable=True),
    # The route resolved at accept (migration 0020; decision 0077): the accounts to try in
    # order (``platform``: the platform's account), the rule that chose it (NULL: the
    # default), and the accounts skipped with why.  NULL route: accepted before routing
    # existed, or by the one-statement accept (shown as ``[connector_account | platform]``).
    sa.Column("route", JsonDocument, nullable=True),
    sa.Column("route_rule", sa.String(100), nullable=True),
    sa.Column("route_skipped", JsonDocument, nullable=True),
    # The accept's trace context, W3C ``traceparent`` (migration 0030, decision 0102): the
    # worker's spans join it whoever woke the worker.  NULL: accepted while tracing was off.
    sa.Column("traceparent", sa.String(55), nullable=True),
    # ``{"ca_…": <that provider's method>}`` as the request sent it (NULL: not sent).
    sa.Column("payment_methods", JsonDocument, nullable=True),
    # Failover (migration 0025, decision 0086): how many times the payment moved to the next
    # account of its route (its current attempt is number failovers + 1, and that number is
    # in every key forwarded for it), and the attempts that ended, as the representation
    # shows them (``payment_attempts`` holds them with their proofs).  NULL: none ended.
    sa.Column("failovers", sa.Integer, nullable=False, server_default="0"),
    sa.Column("route_attempts", JsonDocument, nullable=True),
    sa.Column("provider_payment_id", sa.String(255), nullable=True),
    sa.Column("provider_charge_id", sa.String(255), nullable=True),
    sa.Column("provider_outcome", sa.String(20), nullable=True),
    sa.Column("failure_code", sa.String(100), nullable=True),
    sa.Column("decline_code", sa.String(100), nullable=True),
    sa.Column("failure_message", sa.String(1000), nullable=True),
    sa.Column("last_error", sa.String(2000), nullable=True),
    # The lookup after a create whose outcome is unknown (processing.py): the window is
    # bounded by the create attempts (database clock), and the scan resumes from the cursor.
    sa.Column("first_create_at", UtcDateTime(), nullable=True),
    sa.Column("last_create_at", UtcDateTime(), nullable=True),
    sa.Column("lookup_pending", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("lookup_cursor", sa.String(255), nullable=True),
    sa.Column("lookup_pages", sa.Integer, nullable=False, server_default="0"),
    # Intents that named this record but did not match it (never confirmed), for ops.
    sa.Column("rejected_intents", JsonDocument, nullable=True),
    # What the provider actually moved, as it said when the payment settled.
    sa.Column("settled_amount", sa.BigInteger, nullable=True),
    sa.Column("settled_currency", sa.String(3), nullable=True),
    # A waiting operation (migration 0008b): no lease is held, ``next_attempt_at`` is its
    # re-check time.  waiting_for: customer (3-D Secure, shown as requires_action) or
    # provider (an asynchronous method); waiting_since: when the current wait began (the
    # authentication timeout counts from it).  next_action / client_secret: what the
    # customer must do, exposed only while waiting for the customer.
    sa.Column("waiting_for", sa.String(20), nullable=True),
    sa.Column("waiting_since", UtcDateTime(), nullable=True),
    sa.Column("next_action", JsonDocument, nullable=True),
    sa.Column("client_secret", sa.String(500), nullable=True),
    # A provider event arrived while a worker held the lease: that worker's wait ends at
    # once (the sweeper re-queues it) instead of at the re-check.  Cleared by each claim.
    sa.Column("woken_at", UtcDateTime(), nullable=True),
    # The customer's authentication result forwarded through us (migration 0022, decision
    # 0073): the last one the merchant sent (its body, replayed byte for byte under its key),
    # its forward's number n (key payorch-{id}-details-{n}, taken when the merchant's request
    # committed), and whether it still waits for the provider's answer.
    sa.Column("action_result", JsonDocument, nullable=True),
    sa.Column("action_result_attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("action_result_pending", sa.Boolean, nullable=False, server_default=sa.false()),
    # Money after the charge (migration 0007): what was captured, what refunds hold (the sum
    # of refunds not failed: raised in the refund's accept transaction under the row lock,
    # so it can never pass amount_captured), and what refunds returned.
    sa.Column("amount_captured", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("amount_refund_reserved", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("amount_refunded", sa.BigInteger, nullable=False, server_default="0"),
    # The sequence of the payment's newest merchant event (migration 0017; 0: none yet).
    # Raised by every event writer under the row lock (OutcomeRepository.next_event_sequence)
    # or set by the finish that holds it; always the max of its outbox_events' sequences.
    sa.Column("latest_event_sequence", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("completed_at", UtcDateTime(), nullable=True),
    sa.CheckConstraint("amount_refund_reserved <= amount_captured", name="refunds_within_captured"),
    # The claim: one INSERT ... ON CONFLICT DO NOTHING on this pair, never check-then-insert.
    sa.UniqueConstraint("client_id", "idempotency_key"),
    sa.CheckConstraint("amount > 0", name="amount_positive"),
    sa.CheckConstraint(
        # requires_action is not stored (domain.states.PaymentStatus); requires_capture is.
        "status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'canceled', "
        "'needs_attention')",
        name="status_known",
    ),
    sa.CheckConstraint(
        "recovery_point IN ('accepted', 'intent_created', 'provider_settled', 'completed')",
        name="recovery_point_known",
    ),
)

# The attempts of a payment that ended in a failover (migration 0025, decision 0086): the
# account tried, what it said, and the proof that it moved no money, written in the fenced
# transaction that moved the payment to ``next_connector_account``.  The attempt in progress
# (or the last one) is the payment row itself: a payment that never fails over has no row.
payment_attempts = sa.Table(
    "payment_attempts",
    metadata,
    sa.Column("payment_id", sa.String(40), sa.ForeignKey("payments.id", ondelete="CASCADE")),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("connector_account", sa.String(40), nullable=False),
    sa.Column("provider", sa.String(20), nullable=False),
    sa.Column("provider_payment_id", sa.String(255), nullable=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("failure", JsonDocument, nullable=True),
    # Why it failed over (``domain.failover.FailoverReason``) and what proved it safe.
    sa.Column("reason", sa.String(40), nullable=False),
    sa.Column("proof", sa.String(1000), nullable=False),
    sa.Column("next_connector_account", sa.String(40), nullable=False),
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("ended_at", UtcDateTime(), nullable=False),
    sa.PrimaryKeyConstraint("payment_id", "number"),
)

# The overview's failovers of the last hour (decision 0097; migration 0028), by time.
sa.Index("ix_payment_attempts_ended_at", payment_attempts.c.ended_at)

# The sweeper's scan: leases of unfinished work ordered by expiry.  Partial, so finished
# payments (the overwhelming majority) cost the index nothing.
sa.Index(
    "ix_payments_expired_leases",
    payments.c.locked_until,
    postgresql_where=payments.c.status == "processing",
    sqlite_where=payments.c.status == "processing",
)
# Retention purge: finished payments that still hold idempotency data, oldest first.
sa.Index(
    "ix_payments_retention",
    payments.c.created_at,
    postgresql_where=payments.c.idempotency_key.is_not(None),
    sqlite_where=payments.c.idempotency_key.is_not(None),
)
sa.Index("ix_payments_status", payments.c.status)
# A merchant's list of its payments, newest first by keyset (GET /v1/payments, decision
# 0089; migration 0026): the scan starts at the page's position and stops after a page.
sa.Index("ix_payments_client_created", payments.c.client_id, payments.c.created_at, payments.c.id)
# The overview's failover rate (decision 0097; migration 0028): the payments finished in the
# last hour, read from the window's end of this index.  Partial: an unfinished payment (its
# accept's insert) costs it nothing; the finish's update already rewrites ix_payments_status.
sa.Index(
    "ix_payments_completed",
    payments.c.completed_at,
    postgresql_where=payments.c.completed_at.is_not(None),
    sqlite_where=payments.c.completed_at.is_not(None),
)
# The provider-call recorder maps a retrieve (which names only the provider's intent) to its
# payment by this column; without the index every recorded retrieve would scan payments.
sa.Index("ix_payments_provider_payment_id", payments.c.provider_payment_id)

# Operations after the charge (migration 0007): capture, cancel, refund.  Each row is one
# provider-side effect with its own lease, fencing token, attempts and recovery point, run by
# the same engine as the charge (whose lease stays on the payment row).  A refund's row is
# the refund (its id ``rfd_…`` is the operation id its provider keys derive from).
operations = sa.Table(
    "operations",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("payment_id", sa.String(40), sa.ForeignKey("payments.id"), nullable=False),
    sa.Column("client_id", sa.String(40), nullable=False),
    sa.Column("idempotency_key", sa.String(255), nullable=True),
    sa.Column("request_fingerprint", sa.String(64), nullable=True),
    sa.Column("accepted_response", sa.Text, nullable=True),
    sa.Column("final_response", sa.Text, nullable=True),
    # State and lease, as on the payment row.
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("recovery_point", sa.String(20), nullable=False),
    sa.Column("lease_token", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(200), nullable=True),
    sa.Column("locked_until", UtcDateTime(), nullable=True),
    sa.Column("next_attempt_at", UtcDateTime(), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("unknown_outcomes", sa.Integer, nullable=False),
    # The n of the provider key payorch-{id}-{step}-{n}, taken before the call.
    sa.Column("step_attempts", sa.Integer, nullable=False),
    # An unknown outcome owes a lookup at the provider before anything is re-sent.
    sa.Column("lookup_pending", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("last_error", sa.String(2000), nullable=True),
    # The request.
    sa.Column("amount", sa.BigInteger, nullable=True),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("reason", sa.String(100), nullable=True),
    sa.Column("metadata", JsonDocument, nullable=False),
    sa.Column("origin", sa.String(20), nullable=False, server_default="payorch"),
    # What the provider settled.
    sa.Column("provider_object_id", sa.String(255), nullable=True),
    sa.Column("provider_outcome", sa.String(20), nullable=True),
    sa.Column("failure_code", sa.String(100), nullable=True),
    sa.Column("failure_message", sa.String(1000), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("completed_at", UtcDateTime(), nullable=True),
    # A provider event that came while a worker held the operation (migration 0021): its
    # wait ends at once instead of at the re-check.  Each claim clears it.
    sa.Column("woken_at", UtcDateTime(), nullable=True),
    sa.UniqueConstraint("client_id", "kind", "idempotency_key"),
    sa.CheckConstraint("kind IN ('capture', 'cancel', 'refund', 'refund_sync')", name="kind_known"),
    sa.CheckConstraint(
        "status IN ('processing', 'succeeded', 'failed', 'needs_attention')", name="status_known"
    ),
    sa.CheckConstraint(
        "recovery_point IN ('accepted', 'provider_settled', 'completed')",
        name="recovery_point_known",
    ),
)
sa.Index("ix_operations_payment_id", operations.c.payment_id)
# At most one capture or cancel of a payment that has not failed (migration 0013): the
# database's word behind the row lock of their accept.
_CAPTURE_OR_CANCEL_IN_FLIGHT = sa.and_(
    operations.c.kind.in_(["capture", "cancel"]), operations.c.status != "failed"
)
sa.Index(
    "uq_operations_one_capture_or_cancel",
    operations.c.payment_id,
    unique=True,
    postgresql_where=_CAPTURE_OR_CANCEL_IN_FLIGHT,
    sqlite_where=_CAPTURE_OR_CANCEL_IN_FLIGHT,
)
# One refund row per provider refund (migration 0016): the refund sync records a refund made
# outside payorch once, however many events, syncs or replays name it.  Partial: other kinds
# may name one provider object (an intent) from several rows.
sa.Index(
    "uq_operations_refund_provider_object_id",
    operations.c.provider_object_id,
    unique=True,
    postgresql_where=sa.text("kind = 'refund' AND provider_object_id IS NOT NULL"),
    sqlite_where=sa.text("kind = 'refund' AND provider_object_id IS NOT NULL"),
)
sa.Index(
    "ix_operations_expired_leases",
    operations.c.locked_until,
    postgresql_where=operations.c.status == "processing",
    sqlite_where=operations.c.status == "processing",
)

payment_outcomes = sa.Table(
    "payment_outcomes",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("payment_id", sa.String(40), sa.ForeignKey("payments.id"), nullable=False),
    sa.Column("client_id", sa.String(40), nullable=False),
    sa.Column("provider", sa.String(20), nullable=False),
    sa.Column("provider_payment_id", sa.String(255), nullable=True),
    sa.Column("provider_charge_id", sa.String(255), nullable=True),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("failure_code", sa.String(100), nullable=True),
    sa.Column("decline_code", sa.String(100), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    # Second line of defence behind the lease fence: one outcome per payment and per
    # provider payment, whatever a confused writer attempts.
    sa.UniqueConstraint("payment_id"),
    sa.UniqueConstraint("provider_payment_id"),
)

# Written only in entries (``OutcomeRepository.add_ledger_lines``): one business event's lines
# for one payment, summing to zero per currency.  On PostgreSQL a deferred constraint trigger
# (migration 0031, decision 0101; not declared here) refuses a commit that leaves a touched
# payment's lines out of balance; on SQLite the writer's check is the only guard.
ledger_lines = sa.Table(
    "ledger_lines",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("payment_id", sa.String(40), sa.ForeignKey("payments.id"), nullable=False),
    sa.Column("account", sa.String(100), nullable=False),
    # Signed minor units: debits positive, credits negative; a payment's lines sum to zero
    # in each currency.
    sa.Column("amount", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index("ix_ledger_lines_payment_id", "payment_id"),
)

outbox_events = sa.Table(
    "outbox_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("payment_id", sa.String(40), nullable=False),
    sa.Column("event_type", sa.String(50), nullable=False),
    sa.Column("payload", JsonDocument, nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    # Set when the relay fanned the event out to the subscribed endpoints (deliveries below).
    sa.Column("published_at", UtcDateTime(), nullable=True),
    # The public id (``evt_…``): the webhook-id header and GET /v1/events name it.
    sa.Column("public_id", sa.String(40), nullable=False),
    # Increases per payment (1, 2, …) so a receiver can discard a stale event.
    sa.Column("sequence", sa.Integer, nullable=False),
    sa.UniqueConstraint("public_id"),
    # Also the guard against two writers numbering the same payment's events alike.
    sa.UniqueConstraint("payment_id", "sequence"),
    sa.Index(
        "ix_outbox_events_unpublished",
        "id",
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    ),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("actor_client_id", sa.String(40), nullable=False),
    sa.Column("actor_name", sa.String(200), nullable=False),
    sa.Column("action", sa.String(50), nullable=False),
    sa.Column("payment_id", sa.String(40), nullable=False),
    # The operation acted on (migration 0007); NULL: the payment's charge.
    sa.Column("operation_id", sa.String(40), nullable=True),
    sa.Column("reason", sa.String(1000), nullable=False),
    sa.Column("old_token", sa.BigInteger, nullable=True),
    sa.Column("new_token", sa.BigInteger, nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index("ix_audit_log_payment_id", "payment_id"),
)

# Every provider call a worker made, written after the call returned (its own short
# transaction: never one open across the network call).  What an operator needs to answer
# "did we ask the provider, with which key, and what did it say".
provider_calls = sa.Table(
    "provider_calls",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    # NULL when the call named only a provider object we cannot map to a payment.
    sa.Column("payment_id", sa.String(40), nullable=True),
    sa.Column("operation", sa.String(20), nullable=False),
    sa.Column("method", sa.String(10), nullable=False),
    sa.Column("path", sa.String(300), nullable=False),
    sa.Column("idempotency_key", sa.String(300), nullable=True),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("http_status", sa.Integer, nullable=True),
    sa.Column("provider_object_id", sa.String(255), nullable=True),
    sa.Column("provider_status", sa.String(50), nullable=True),
    sa.Column("error", sa.String(500), nullable=True),
    sa.Column("latency_ms", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index("ix_provider_calls_payment_id", "payment_id"),
)

# Disputes the provider reported (charge.dispute.* events), one row per provider dispute.
# Recorded for ops and the merchant (payment.disputed); no money state of the payment is
# derived from them.  ``last_event_created`` keeps a late, older event from overwriting a
# newer status.
payment_disputes = sa.Table(
    "payment_disputes",
    metadata,
    sa.Column("id", sa.String(255), primary_key=True),  # the provider's (dp_…)
    sa.Column("payment_id", sa.String(40), sa.ForeignKey("payments.id"), nullable=False),
    sa.Column("provider_payment_id", sa.String(255), nullable=True),
    sa.Column("amount", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("reason", sa.String(100), nullable=True),
    sa.Column("status", sa.String(50), nullable=False),
    sa.Column("last_event_created", sa.BigInteger, nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Index("ix_payment_disputes_payment_id", "payment_id"),
)

# Lease history: every claim, takeover, deferral, park, retry and finish, written in the same
# transaction as the lease change it describes (renewals are not recorded: too many).
lease_events = sa.Table(
    "lease_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("payment_id", sa.String(40), nullable=False),
    # The operation whose lease this is (migration 0007); NULL: the payment's charge.
    sa.Column("operation_id", sa.String(40), nullable=True),
    sa.Column("event", sa.String(20), nullable=False),
    sa.Column("owner", sa.String(200), nullable=True),
    sa.Column("lease_token", sa.BigInteger, nullable=False),
    sa.Column("locked_until", UtcDateTime(), nullable=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("recovery_point", sa.String(20), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index("ix_lease_events_payment_id", "payment_id"),
)

# Merchant webhook endpoints (orchestrator/events/).  Deleting one keeps the row (its
# deliveries and attempts refer to it) with deleted_at set; nothing reads it afterwards.
webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("client_id", sa.String(40), sa.ForeignKey("api_clients.id"), nullable=False),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("events", JsonDocument, nullable=False),  # event types, or ["*"]
    sa.Column("description", sa.String(1000), nullable=True),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("disabled_reason", sa.String(500), nullable=True),
    # Fernet tokens (key derived from SECRET_KEY, orchestrator/events/secrets.py): the
    # relay needs the secret itself to sign, so it cannot be stored as a hash.
    sa.Column("secret_encrypted", sa.Text, nullable=False),
    # After a rotation the old secret signs too (a second signature) until this instant.
    sa.Column("previous_secret_encrypted", sa.Text, nullable=True),
    sa.Column("previous_secret_expires_at", UtcDateTime(), nullable=True),
    # Bumped by every change: the ETag that If-Match compares.
    sa.Column("version", sa.Integer, nullable=False),
    # The first failed attempt since the last success: failing for the whole retry window
    # disables the endpoint.
    sa.Column("failing_since", UtcDateTime(), nullable=True),
    # One attempt in flight per endpoint: the lease expiry of the delivery a relay is
    # attempting (set by the claim, cleared by the record, migration 0023).  No other
    # delivery of the endpoint is claimed before it passes.
    sa.Column("attempt_locked_until", UtcDateTime(), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("rotated_at", UtcDateTime(), nullable=True),
    sa.Column("deleted_at", UtcDateTime(), nullable=True),
    sa.CheckConstraint("status IN ('enabled', 'disabled')", name="status_known"),
    sa.Index("ix_webhook_endpoints_client_id", "client_id"),
)

# One delivery per event and endpoint, leased by a relay while it attempts it.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("event_id", sa.BigInteger, sa.ForeignKey("outbox_events.id"), nullable=False),
    sa.Column("endpoint_id", sa.String(40), sa.ForeignKey("webhook_endpoints.id"), nullable=False),
    sa.Column("status", sa.String(12), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", UtcDateTime(), nullable=True),
    # Retries stop WEBHOOK_RETRY_HOURS after this (a redeliver starts a new window).
    sa.Column("window_started_at", UtcDateTime(), nullable=False),
    sa.Column("lease_owner", sa.String(200), nullable=True),
    sa.Column("lease_token", sa.BigInteger, nullable=False),
    sa.Column("locked_until", UtcDateTime(), nullable=True),
    sa.Column("last_status_code", sa.Integer, nullable=True),
    sa.Column("last_error", sa.String(500), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("delivered_at", UtcDateTime(), nullable=True),
    sa.UniqueConstraint("event_id", "endpoint_id"),
    sa.CheckConstraint("status IN ('pending', 'delivered', 'failed')", name="status_known"),
    sa.Index("ix_webhook_deliveries_endpoint_id", "endpoint_id"),
)
# The relay's claim: pending deliveries by due time.  Partial: delivered ones cost nothing.
sa.Index(
    "ix_webhook_deliveries_due",
    webhook_deliveries.c.next_attempt_at,
    postgresql_where=webhook_deliveries.c.status == "pending",
    sqlite_where=webhook_deliveries.c.status == "pending",
)
# The console's webhook backlog chart (decision 0103; migration 0029): the deliveries that
# settled inside the window, by when (a settled delivery's last write is its settling).
# Partial: a pending delivery costs it nothing.
sa.Index(
    "ix_webhook_deliveries_settled",
    webhook_deliveries.c.updated_at,
    postgresql_where=webhook_deliveries.c.status != "pending",
    sqlite_where=webhook_deliveries.c.status != "pending",
)

# Every attempt, written with the delivery's new state in one transaction after the HTTP
# call returned (never a transaction open across it).
webhook_delivery_attempts = sa.Table(
    "webhook_delivery_attempts",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column(
        "delivery_id",
        sa.BigInteger,
        sa.ForeignKey("webhook_deliveries.id"),
        nullable=False,
    ),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("relay", sa.String(200), nullable=False),
    sa.Column("lease_token", sa.BigInteger, nullable=False),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("latency_ms", sa.Integer, nullable=False),
    sa.Column("response_body", sa.String(1024), nullable=True),
    sa.Column("error", sa.String(500), nullable=True),
    # The relay host's clock (started) and the database's (created): descriptive only.
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index("ix_webhook_delivery_attempts_delivery_id", "delivery_id"),
)

# Events a provider sent us (Stripe's webhooks), each stored once by its id: a hint that
# wakes the payment it names, never applied as the truth (docs/providers/index.md,
# "Provider events in").
provider_events = sa.Table(
    "provider_events",
    metadata,
    sa.Column("id", sa.String(255), primary_key=True),  # Stripe's evt_… id
    sa.Column("provider", sa.String(20), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("provider_created", sa.BigInteger, nullable=False),  # the provider's clock
    sa.Column("object_type", sa.String(50), nullable=False),
    sa.Column("object_id", sa.String(255), nullable=False),
    sa.Column("provider_payment_id", sa.String(255), nullable=True),
    # Our payment, when the event's intent is one of ours (NULL: not ours, or no intent).
    sa.Column("payment_id", sa.String(40), sa.ForeignKey("payments.id"), nullable=True),
    sa.Column("payload", JsonDocument, nullable=False),
    sa.Column("received_at", UtcDateTime(), nullable=False),
    # Whether receiving it made a deferred payment due at once.
    sa.Column("woke_payment", sa.Boolean, nullable=False),
    sa.Index("ix_provider_events_payment_id", "payment_id"),
    sa.Index("ix_provider_events_received_at", "received_at"),
)

# Connector accounts (migration 0018; domain.connector_accounts): one merchant's account at
# one provider.  Never deleted: disabling keeps the row, so the payments that ran on it
# (their refunds, captures and cancels) still find their credentials.
connector_accounts = sa.Table(
    "connector_accounts",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("client_id", sa.String(40), sa.ForeignKey("api_clients.id"), nullable=False),
    sa.Column("provider", sa.String(20), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    # One Fernet token of the credentials' JSON (key derived from PAYORCH_SECRET_KEY with
    # its own purpose label, as webhook secrets): a database dump reveals no credential.
    sa.Column("credentials_encrypted", sa.Text, nullable=False),
    # ``{"api_key": "…1234"}``: what answers show, so a list decrypts nothing.
    sa.Column("credential_hints", JsonDocument, nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("disabled_reason", sa.String(1000), nullable=True),
    # Bumped by every change: the ETag, and the worker's provider cache key.
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.CheckConstraint("provider IN ('stripe', 'adyen')", name="provider_known"),
    sa.CheckConstraint("status IN ('enabled', 'disabled')", name="status_known"),
    sa.Index("ix_connector_accounts_client_id", "client_id"),
)

# Who owns a saved customer or payment method (migration 0018; decision 0063): the first
# merchant whose payment named it.  The primary key makes "first" race-safe: the accept
# inserts with ON CONFLICT DO NOTHING and then reads the owner.
payment_method_owners = sa.Table(
    "payment_method_owners",
    metadata,
    sa.Column("kind", sa.String(20), primary_key=True),  # customer | payment_method
    sa.Column("external_id", sa.String(255), primary_key=True),
    sa.Column("client_id", sa.String(40), sa.ForeignKey("api_clients.id"), nullable=False),
    # A payment method's customer when it was first used with one.
    sa.Column("customer", sa.String(255), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.CheckConstraint("kind IN ('customer', 'payment_method')", name="kind_known"),
)

# A merchant's routing configuration (migration 0020; domain.routing, decision 0076): one
# per client, replaced whole by each PUT; ``version`` is its ETag.
routing_configurations = sa.Table(
    "routing_configurations",
    metadata,
    sa.Column("client_id", sa.String(40), sa.ForeignKey("api_clients.id"), primary_key=True),
    sa.Column("rules", JsonDocument, nullable=False),
    sa.Column("default_route", JsonDocument, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
)

# A connector account's circuit (migration 0024; domain.circuit, decision 0082): one row per
# account that ever failed (the platform's own account is ``ca_platform_stripe``), shared by
# every worker and host.  Written on failures and state changes only, under its row lock.
circuits = sa.Table(
    "circuits",
    metadata,
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("state", sa.String(10), nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("window_started_at", UtcDateTime(), nullable=True),
    sa.Column("since", UtcDateTime(), nullable=True),
    sa.Column("opened_at", UtcDateTime(), nullable=True),
    sa.Column("next_probe_at", UtcDateTime(), nullable=True),
    sa.Column("probes", sa.Integer, nullable=False),
    sa.Column("released_at", UtcDateTime(), nullable=True),
    sa.Column("probe_released_at", UtcDateTime(), nullable=True),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.CheckConstraint("state IN ('closed', 'open', 'half_open')", name="state_known"),
)
# The payments waiting out a circuit, oldest first per account: what the sweeper releases
# (``engine.circuits.release_waiting``).  Partial: only such waits cost the index anything.
sa.Index(
    "ix_payments_circuit_waits",
    payments.c.connector_account_id,
    payments.c.created_at,
    postgresql_where=payments.c.waiting_for == "circuit",
    sqlite_where=payments.c.waiting_for == "circuit",
)

# Reconciliation (migration 0027; decisions 0092, 0093).  A run compares one connector
# account's provider objects created in a window with our rows; ``phase`` and ``cursor`` are
# its recovery point (the last provider object whose page was committed), ``lease_token`` and
# ``locked_until`` keep a second process from advancing the same run.
reconciliation_runs = sa.Table(
    "reconciliation_runs",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("connector_account", sa.String(40), nullable=False),
    sa.Column("provider", sa.String(20), nullable=False),
    sa.Column("window_start", UtcDateTime(), nullable=False),
    sa.Column("window_end", UtcDateTime(), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("phase", sa.String(20), nullable=False),
    sa.Column("cursor", sa.String(255), nullable=True),
    sa.Column("lease_token", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(200), nullable=True),
    sa.Column("locked_until", UtcDateTime(), nullable=True),
    sa.Column("pages", sa.Integer, nullable=False, server_default="0"),
    sa.Column("payments_seen", sa.Integer, nullable=False, server_default="0"),
    sa.Column("refunds_seen", sa.Integer, nullable=False, server_default="0"),
    sa.Column("matched", sa.Integer, nullable=False, server_default="0"),
    # Provider objects without our reference: not ours, never a finding.
    sa.Column("foreign_objects", sa.Integer, nullable=False, server_default="0"),
    # Ours still moving (processing): compared by a later run, not guessed at.
    sa.Column("in_flight", sa.Integer, nullable=False, server_default="0"),
    sa.Column("findings_new", sa.Integer, nullable=False, server_default="0"),
    sa.Column("findings_seen", sa.Integer, nullable=False, server_default="0"),
    sa.Column("ledger_balanced", sa.Boolean, nullable=True),
    sa.Column("ledger_sums", JsonDocument, nullable=True),
    sa.Column("error", sa.String(1000), nullable=True),
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("finished_at", UtcDateTime(), nullable=True),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.CheckConstraint("status IN ('running', 'completed', 'failed')", name="status_known"),
    sa.CheckConstraint(
        "phase IN ('payments', 'refunds', 'balance', 'ours', 'done')", name="phase_known"
    ),
    sa.CheckConstraint("window_start < window_end", name="window"),
    sa.Index("ix_reconciliation_runs_started_at", "started_at"),
)

# One row per discrepancy, unique on its identity (kind, connector account, provider object):
# a rerun finds the row (``last_run_id`` moves) and adds none; a resolved one stays resolved.
reconciliation_findings = sa.Table(
    "reconciliation_findings",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("kind", sa.String(30), nullable=False),
    sa.Column("connector_account", sa.String(40), nullable=False),
    sa.Column("provider_object_id", sa.String(255), nullable=False),
    sa.Column("object_type", sa.String(20), nullable=False),
    sa.Column("payment_id", sa.String(40), nullable=True),
    sa.Column("operation_id", sa.String(40), nullable=True),
    # Both sides as each said it (``domain.reconciliation.Side``); null: that side has none.
    sa.Column("ours", JsonDocument, nullable=True),
    sa.Column("theirs", JsonDocument, nullable=True),
    sa.Column("first_run_id", sa.String(40), nullable=False),
    sa.Column("last_run_id", sa.String(40), nullable=False),
    sa.Column("resolution", sa.String(20), nullable=False),
    sa.Column("resolved_reason", sa.String(1000), nullable=True),
    sa.Column("resolved_by", sa.String(40), nullable=True),
    sa.Column("resolved_by_name", sa.String(200), nullable=True),
    sa.Column("resolved_at", UtcDateTime(), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.UniqueConstraint(
        "kind",
        "connector_account",
        "provider_object_id",
        name=sa.sql.elements.conv("uq_reconciliation_findings_discrepancy"),
    ),
    sa.CheckConstraint(
        "kind IN ('orphan_at_provider', 'missing_at_provider', 'amount_mismatch', "
        "'status_mismatch', 'refund_mismatch', 'ledger_imbalance')",
        name="kind_known",
    ),
    sa.CheckConstraint("resolution IN ('open', 'resolved')", name="resolution_known"),
    sa.CheckConstraint(
        "resolution = 'open' OR (resolved_reason IS NOT NULL AND resolved_by IS NOT NULL)",
        name="resolved_says_why",
    ),
    sa.Index("ix_reconciliation_findings_last_run_id", "last_run_id"),
)
# Open findings by kind: the metric's scrape and ``payorch status``.
sa.Index(
    "ix_reconciliation_findings_open",
    reconciliation_findings.c.kind,
    postgresql_where=reconciliation_findings.c.resolution == "open",
    sqlite_where=reconciliation_findings.c.resolution == "open",
)

# Our payments and refunds a run saw at the provider, so its last phase finds ours the
# provider lacks by an anti-join instead of a set held in memory; deleted when it finishes.
reconciliation_matches = sa.Table(
    "reconciliation_matches",
    metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("our_id", sa.String(40), primary_key=True),
)
