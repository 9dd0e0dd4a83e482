"""Configuration: environment variables with the prefix ``PAYORCH_`` (pydantic-settings).

Every timeout below says what goes wrong when it is too short or too long, because
the lease arithmetic only holds when they keep their order::

    PROVIDER_TIMEOUT < task soft limit < task hard limit < LEASE_SECONDS

"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.providers.stripe_version import PINNED_API_VERSION

PLACEHOLDER_SECRETS = frozenset({"", "changeme", "change-me", "secret", "dev-secret-key"})
MIN_SECRET_LENGTH = 32
DEV_SECRET_KEY = "dev-secret-key"  # noqa: S105 - the dev-only placeholder, refused outside dev
# The key the simulator accepts; a production process configured with it (or with a
# plain-http provider) would "charge" a fake and report success: refused in production.
SIMULATOR_STRIPE_API_KEY = "sk_test_payorch_simulator"
STRIPE_KEY_PREFIXES = ("sk_live_", "sk_test_", "rk_live_", "rk_test_")


class Settings(BaseSettings):
    # hide_input_in_errors: a ValidationError's text must never carry a value (the Stripe
    # key, a database password), whoever prints it.
    model_config = SettingsConfigDict(
        env_prefix="PAYORCH_", extra="ignore", hide_input_in_errors=True
    )

    env: Literal["dev", "test", "production"] = "dev"

    # Storage and broker.  SQLite is the embedded default (one file, no server).
    # URLs carry passwords: kept out of repr() (they stay plain str, which every engine and
    # broker client takes; errors never show them, see model_config).
    database_url: str = Field(default="sqlite:///payorch.sqlite3", repr=False)
    broker_url: str = Field(default="amqp://guest:guest@127.0.0.1:5672//", repr=False)
    # Connections per process.  Too small: concurrent requests queue for a connection and
    # hit db_pool_timeout_seconds; too large: API + workers exceed PostgreSQL's max_connections.
    db_pool_size: int = Field(default=20, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    db_pool_timeout_seconds: float = Field(default=10.0, gt=0)
    # Messages a threads-pool worker process holds at least, beside one and a half per slow
    # provider call in progress (workers/prefetch_limit.py).  Too small: payments wait in
    # the broker while the database's round trips leave the process idle (a database tens of
    # milliseconds away wants more); too large: at a fast provider the payments held compete
    # for the interpreter lock.  The process's threads (--concurrency) fix the prefetch.
    worker_prefetch_floor: int = Field(default=8, ge=1)
    # Statement timeout on PostgreSQL.  Too short: a healthy but busy database fails requests;
    # too long: a stuck lock holds an API thread (and its client) hostage.
    db_statement_timeout_ms: int = Field(default=5000, ge=100)

    # Provider.
    # SecretStr: printed as '**********' by repr(), logs and tracebacks.
    stripe_api_key: SecretStr = SecretStr(SIMULATOR_STRIPE_API_KEY)
    stripe_api_base: str = "https://api.stripe.com"
    # Read timeout of one provider call.  Too short: slow-but-successful calls turn into
    # "outcome unknown" and cost a status query; too long: a hung provider eats the lease.
    provider_timeout_seconds: float = Field(default=10.0, gt=0)
    # TCP connect timeout.  A refused or unroutable connect proves the request never left,
    # so it can be short.
    provider_connect_timeout_seconds: float = Field(default=3.0, gt=0)
    # The Stripe API version sent as ``Stripe-Version`` on every request.  Pinned: object
    # shapes change between versions, and the adapter, the cassettes and the simulator are
    # written for this one.  Move it only together with them (README, "Stripe API version").
    stripe_api_version: str = Field(default=PINNED_API_VERSION, min_length=1)
    # The signing secret of payorch's endpoint in Stripe (whsec_…): POST
    # /v1/providers/stripe/webhooks verifies every event with it.  Unset: the route answers
    # 503 and stores nothing (no event can be trusted without it).
    stripe_webhook_secret: SecretStr | None = None

    # The lookup after a create whose outcome is unknown (README, "The lookup").  Its window
    # is [first create - margin, latest create + provider timeout + margin].  The margin
    # covers Stripe's clock against the database's: too small and an intent stamped by a
    # clock behind ours is missed (the scan then wrongly finds nothing, though the create key
    # still protects against a second intent); too large and busy accounts mean more pages.
    lookup_clock_margin_seconds: float = Field(default=300.0, ge=0)
    # Pages (of 100 intents) one task reads before handing the rest to a later attempt,
    # which resumes from the stored cursor.  Too many: one attempt outlives its time budget
    # (it is cut off anyway, and resumes); too few: a busy window needs many attempts, and
    # MAX_ATTEMPTS claims park the payment.  Default: 100 pages = 10,000 intents a task.
    lookup_pages_per_attempt: int = Field(default=100, ge=1)

    # Leases.  Too short: a healthy worker is taken over mid-call and its work is fenced off
    # (wasted, never doubled); too long: a crashed worker's payment waits that long.
    lease_seconds: float = Field(default=60.0, gt=0)
    # How long a freshly accepted record waits for a worker before the sweeper may take it.
    # Too short: a queue backlog turns into needless takeovers; too long: a lost publish
    # delays the payment by this much.
    dispatch_lease_seconds: float = Field(default=60.0, gt=0)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    sweep_batch_size: int = Field(default=100, ge=1)
    max_attempts: int = Field(default=8, ge=1)

    # Waiting operations (3-D Secure, asynchronous methods): no lease is held while waiting.
    # How often the sweeper re-checks a payment waiting for its customer, when no provider
    # event woke it first.  Too short: a provider read per waiting payment that often; too
    # long: a payment whose webhooks were lost shows requires_action that much longer.
    action_recheck_seconds: float = Field(default=300.0, gt=0)
    # How long a customer has to authenticate before the intent is canceled at the provider
    # and the payment ends canceled / authentication_timeout.  Too short: customers are cut
    # off mid-authentication; too long: abandoned intents (and the merchant's order) stay
    # open that long.
    action_timeout_seconds: float = Field(default=3600.0, gt=0)
    # The re-check of a payment the provider is still processing (an asynchronous method),
    # when no event settled it first.  Slow on purpose: such methods settle in hours or days.
    processing_recheck_seconds: float = Field(default=300.0, gt=0)

    # Retries owned by the worker: exponential backoff with full jitter and a cap.
    retry_base_seconds: float = Field(default=0.5, gt=0)
    retry_cap_seconds: float = Field(default=60.0, gt=0)
    # Waits up to this long happen inside the task; longer ones are stored as
    # next_attempt_at for the sweeper (no broker countdown outlives a visibility timeout).
    max_in_task_wait_seconds: float = Field(default=5.0, ge=0)

    # Retention of idempotency data (keys, fingerprints, stored responses).
    idempotency_retention_hours: float = Field(default=24.0, gt=0)
    retention_batch_size: int = Field(default=500, ge=1)

    # HMAC key for idempotency keys in logs.  Refused outside dev when missing or a placeholder.
    secret_key: SecretStr = SecretStr(DEV_SECRET_KEY)

    # Threads serving synchronous API handlers; keep <= pool size + overflow so a burst waits
    # in the threadpool queue, not on the connection pool.
    api_threads: int = Field(default=30, ge=1)
    # Seconds the API waits for RabbitMQ when publishing.  Too long: a broker outage slows
    # every accept; too short: a busy broker loses wake-ups (the sweeper still finds them).
    publish_timeout_seconds: float = Field(default=2.0, gt=0)
    # How an accepted payment wakes a worker.  ``notify`` (PostgreSQL only, its default): the
    # accept's INSERT also sends a PostgreSQL NOTIFY, delivered only if it commits, and the
    # dispatcher (``payorch sweeper`` hosts it; ``payorch dispatcher`` runs it alone) publishes
    # the task; the API never talks to the broker on the request.  ``publish`` (SQLite's only
    # mode): the API publishes the task itself after the commit.  Either way a lost wake-up
    # is found by the sweeper once the dispatch lease expires.
    wake_up: Literal["notify", "publish"] | None = None

    # Retry-After on a processing payment: how long a polling client should wait.
    poll_interval_seconds: int = Field(default=1, ge=1)

    # The ops console's signed session cookie.  Too long: a forgotten signed-in browser (or a
    # stolen cookie) keeps operator powers that long; too short: on-call people sign in again
    # mid-incident.  Revoking the ops API key ends its sessions at once.
    console_session_minutes: int = Field(default=480, ge=1, le=7 * 24 * 60)
    # The cookie's Secure flag (sent over HTTPS only).  Default: on in production, off
    # elsewhere (a local console on http://127.0.0.1 would never get its cookie back).
    console_secure_cookie: bool | None = None

    # Merchant webhooks (orchestrator/events/).
    # Private, loopback and link-local targets and plain http; always allowed in dev.
    # Never in production unless the relay's network cannot reach anything internal.
    webhook_allow_private: bool = False
    # Retries: full jitter, ceiling base * 2**n capped; given up after the window.  Too short a
    # window loses events to a merchant's weekend outage; the 72 h default is Stripe's.
    webhook_retry_base_seconds: float = Field(default=5.0, gt=0)
    webhook_retry_cap_seconds: float = Field(default=3600.0, gt=0)
    webhook_retry_hours: float = Field(default=72.0, gt=0)
    # One attempt: connect timeout, then the whole request and response must fit in the
    # timeout.  Too long: slow endpoints hold relay threads (others' events wait); too
    # short: a merchant doing work before answering is retried needlessly.
    webhook_connect_timeout_seconds: float = Field(default=3.0, gt=0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    # Bytes of an answer read (then the connection is dropped); 1 KiB of it is stored.
    webhook_response_max_bytes: int = Field(default=64 * 1024, ge=1024)
    # A relay's lease on a delivery.  Must outlast an attempt (connect + timeout) with margin,
    # or a second relay could attempt the same delivery while the first is still sending.
    webhook_lease_seconds: float = Field(default=60.0, gt=0)
    # Deliveries attempted at once by one relay (threads; `relay --once`: claimed per pass).
    # Each thread uses one pooled connection during its short transactions: keep it under
    # DB_POOL_SIZE + DB_MAX_OVERFLOW, or threads wait for a connection.
    relay_concurrency: int = Field(default=8, ge=1, le=256)
    # Sleep when a pass found nothing to do.  Latency of a new event is at most about this.
    relay_idle_seconds: float = Field(default=0.5, gt=0)
    # After a rotation the previous secret keeps signing (a second signature) this long.
    webhook_secret_grace_hours: float = Field(default=24.0, ge=0)
    # Events (with their deliveries and attempts) are purged this long after they were
    # written once no delivery of theirs is pending.  GET /v1/events reaches this far back.
    webhook_event_retention_days: float = Field(default=30.0, gt=0)

    log_level: str = "INFO"
    log_json: bool = True

    @model_validator(mode="after")
    def _check(self) -> Settings:
        secret_key = self.secret_key.get_secret_value()
        if self.env != "dev" and (
            secret_key in PLACEHOLDER_SECRETS or len(secret_key) < MIN_SECRET_LENGTH
        ):
            # A short key makes the HMACs in logs guessable for short idempotency keys.
            raise ValueError(
                "PAYORCH_SECRET_KEY is missing or a placeholder (or shorter than "
                f"{MIN_SECRET_LENGTH} characters); set it to a long random value "
                "(for example: python -c 'import secrets; print(secrets.token_urlsafe(48))') "
                "or run with PAYORCH_ENV=dev"
            )
        if self.env == "production":
            self._check_real_provider()
        attempt = self.webhook_connect_timeout_seconds + self.webhook_timeout_seconds
        if self.webhook_lease_seconds < 2 * attempt:
            raise ValueError(
                "PAYORCH_WEBHOOK_LEASE_SECONDS must be at least twice "
                "PAYORCH_WEBHOOK_CONNECT_TIMEOUT_SECONDS + PAYORCH_WEBHOOK_TIMEOUT_SECONDS "
                f"({attempt:.1f}s): a lease that ends mid-attempt lets a second relay send the "
                "same delivery at the same time"
            )
        if self.wake_up == "notify" and self.is_sqlite:
            raise ValueError(
                "PAYORCH_WAKE_UP=notify needs PostgreSQL (LISTEN/NOTIFY); SQLite publishes "
                "from the API (PAYORCH_WAKE_UP=publish, its default)"
            )
        if self.provider_timeout_seconds >= self.task_soft_time_limit:
            raise ValueError(
                "PAYORCH_PROVIDER_TIMEOUT_SECONDS must be well below PAYORCH_LEASE_SECONDS "
                f"(a provider call must fit in the task's soft limit of "
                f"{self.task_soft_time_limit:.1f}s, which is 0.6 x the lease)"
            )
        return self

    def _check_real_provider(self) -> None:
        """Production talks to a real provider: a forgotten variable must not leave it
        "charging" the simulator (or anything else over plain http) and reporting success."""
        if not self.stripe_api_base.startswith("https://"):
            raise ValueError(
                "PAYORCH_STRIPE_API_BASE must be an https:// URL in production (Stripe's is "
                "https://api.stripe.com); the simulator is for PAYORCH_ENV=dev or test"
            )
        key = self.stripe_api_key.get_secret_value()
        if key == SIMULATOR_STRIPE_API_KEY or not key.startswith(STRIPE_KEY_PREFIXES):
            raise ValueError(
                "PAYORCH_STRIPE_API_KEY must be set to a Stripe secret or restricted key "
                "(sk_live_..., rk_live_..., or sk_test_... for Stripe's test mode) in production"
            )

    @cached_property
    def task_time_limit(self) -> float:
        """Hard limit: the pool kills the task before its lease can expire under it."""
        return self.lease_seconds * 0.8

    @cached_property
    def task_soft_time_limit(self) -> float:
        """Soft limit: the task stops starting provider calls and defers its work."""
        return self.lease_seconds * 0.6

    @property
    def console_cookie_is_secure(self) -> bool:
        if self.console_secure_cookie is not None:
            return self.console_secure_cookie
        return self.env == "production"

    @property
    def webhook_private_targets_allowed(self) -> bool:
        """Dev, or the explicit flag: loopback/private targets and plain http."""
        return self.env == "dev" or self.webhook_allow_private

    @property
    def wake_up_mode(self) -> Literal["notify", "publish"]:
        """PAYORCH_WAKE_UP, or its default: ``notify`` on PostgreSQL, ``publish`` on SQLite."""
        if self.wake_up is not None:
            return self.wake_up
        return "publish" if self.is_sqlite else "notify"

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
