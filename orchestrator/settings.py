"""Configuration: environment variables with the prefix ``PAYORCH_`` (pydantic-settings).

Every timeout below says what goes wrong when it is too short or too long, because
the lease arithmetic only holds when they keep their order::

    PROVIDER_TIMEOUT < task soft limit < task hard limit < LEASE_SECONDS

The checks a configuration must pass, and the placeholder values they refuse, are in
``orchestrator.settings_checks``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.settings_checks import (
    DEV_SECRET_KEY,
    MIN_SECRET_LENGTH,
    SIMULATOR_STRIPE_API_KEY,
    check_settings,
)
from orchestrator.stripe_version import PINNED_API_VERSION


class Settings(BaseSettings):
    # hide_input_in_errors: a ValidationError's text must never carry a value (the Stripe
    # key, a database password), whoever prints it.
    model_config = SettingsConfigDict(
        env_prefix="PAYORCH_", extra="ignore", hide_input_in_errors=True
    )

    # No default (decision 0070): unset, every process refuses to start and says so.
    # Defaulting to dev was insecure; defaulting to production would hide the choice.
    env: Literal["dev", "test", "production"] = Field(
        description=(
            "Required: `production`, `test` or `dev`; unset, every process refuses to start. "
            "Outside `dev` a missing or placeholder `SECRET_KEY` refuses to start; "
            "`production` also refuses a provider that is not real (a plain-http "
            "`STRIPE_API_BASE` or the simulator's key). `dev` (a developer's machine only) "
            "also allows webhooks to private addresses and plain http, and console cookies "
            "without `Secure`."
        ),
    )

    # Storage and broker.  SQLite is the embedded default (one file, no server).
    # URLs carry passwords: kept out of repr() (they stay plain str, which every engine and
    # broker client takes; errors never show them, see model_config).
    database_url: str = Field(
        default="sqlite:///payorch.sqlite3",
        repr=False,
        description=(
            "SQLAlchemy URL: `postgresql+psycopg://…` in production, SQLite for the "
            "embedded default (one file, no server)."
        ),
    )
    broker_url: str = Field(
        default="amqp://guest:guest@127.0.0.1:5672//",
        repr=False,
        description="The Celery broker: RabbitMQ (Redis also works with Celery).",
    )
    db_pool_size: int = Field(
        default=20,
        ge=1,
        description=(
            "Pooled database connections per process. Too small: concurrent requests queue "
            "for a connection and hit `DB_POOL_TIMEOUT_SECONDS`; too large: the API and the "
            "workers together exceed PostgreSQL's `max_connections`. `payorch worker` sizes "
            "it from its pool when unset (threads: one per thread + 2, at most 32, no "
            "overflow; prefork: 3 per child)."
        ),
    )
    db_max_overflow: int = Field(
        default=10, ge=0, description="Connections a process may open beyond the pool."
    )
    db_pool_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long a request waits for a pooled connection before it fails (503).",
    )
    worker_prefetch_floor: int = Field(
        default=8,
        ge=1,
        description=(
            "Messages a threads-pool worker process holds at least, beside one and a half "
            "per slow provider call in progress (`workers/prefetch_limit.py`). Too small: "
            "payments wait in the broker while the database's round trips leave the process "
            "idle (a database tens of milliseconds away wants more); too large: at a fast "
            "provider the payments held compete for the interpreter lock. Set it to the "
            "process's threads for a fixed prefetch."
        ),
    )
    db_statement_timeout_ms: int = Field(
        default=5000,
        ge=100,
        description=(
            "PostgreSQL statement timeout. Too short: a healthy but busy database fails "
            "requests; too long: a stuck lock holds an API thread (and its client) hostage. "
            "PostgreSQL also ends a session idle in a transaction after a third of "
            "`LEASE_SECONDS`, so a frozen process cannot hold a row lock past its lease."
        ),
    )

    # Provider.
    # SecretStr: printed as '**********' by repr(), logs and tracebacks.
    stripe_api_key: SecretStr = Field(
        default=SecretStr(SIMULATOR_STRIPE_API_KEY),
        description=(
            "The Stripe key (a secret: never printed). The default is the simulator's. In "
            "`production` it must be a Stripe key (`sk_live_`, `rk_live_`, or "
            "`sk_test_`/`rk_test_` for Stripe's test mode) and not the simulator's."
        ),
    )
    stripe_api_base: str = Field(
        default="https://api.stripe.com",
        description=(
            "Where the Stripe adapter sends its requests. Point it at `payorch provider-sim` "
            "for tests and demos (`ENV=dev` or `test`); `production` refuses anything but "
            "`https://`."
        ),
    )
    adyen_api_base: str = Field(
        default="https://checkout-test.adyen.com",
        description=(
            "The Checkout API root for Adyen connector accounts without a live URL prefix "
            "(Adyen's test endpoint by default; `/v71` is appended). Point it at the Adyen "
            "simulator (`python -m devtools.adyen_simulator`) for tests and demos; "
            "`production` refuses anything but `https://`. A live account's own prefix "
            "(`live_url_prefix` in its credentials) always wins."
        ),
    )
    adyen_reports_base: str = Field(
        default="https://ca-test.adyen.com/reports/download",
        description=(
            "Where reconciliation downloads an Adyen test account's Settlement details "
            "reports (`{base}/MerchantAccount/{merchantAccount}/"
            "settlement_detail_report_batch_{n}.csv`, with the account's API key). An "
            "account with a live URL prefix reads `https://ca-live.adyen.com/reports/download`. "
            "Point it at the Adyen simulator's `/reports/download` for tests and demos; "
            "`production` refuses anything but `https://`."
        ),
    )
    adyen_technical_cancel_after: int = Field(
        default=3,
        ge=1,
        description=(
            "Unknown outcomes (timeouts, 5xx) of an Adyen authorisation after which its "
            "idempotency key is no longer replayed: a technical cancel by our reference "
            "resolves it, and its TECHNICAL_CANCEL notification settles the payment. The "
            "attempts left below `MAX_ATTEMPTS` are the time that notification has to arrive "
            "before the payment parks, so at most `MAX_ATTEMPTS` - 1 takes effect. Too low: "
            "a brief Adyen outage ends payments failed that one more replay would have "
            "completed; too high: little time is left for the notification."
        ),
    )
    provider_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Read timeout of one provider call. Too short: slow-but-successful calls turn "
            'into "outcome unknown" and cost a status query; too long: a hung provider eats '
            "the lease. Must stay below the task's soft limit (0.6 x `LEASE_SECONDS`)."
        ),
    )
    provider_connect_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description=(
            "TCP connect timeout of a provider call. A refused or unroutable connect proves "
            "the request never left, so it can be short."
        ),
    )
    stripe_api_version: str = Field(
        default=PINNED_API_VERSION,
        min_length=1,
        description=(
            "Sent as `Stripe-Version` on every request. Pinned: object shapes change between "
            "versions, and the adapter, the cassettes and the simulator are written for this "
            "one; move it only together with them."
        ),
    )
    stripe_webhook_secret: SecretStr | None = Field(
        default=None,
        description=(
            "The signing secret (`whsec_…`) of payorch's endpoint in Stripe (a secret: never "
            "printed). `POST /v1/providers/stripe/webhooks` verifies every event with it; "
            "unset, the route answers 503 and stores nothing (no event can be trusted "
            "without it)."
        ),
    )

    lookup_clock_margin_seconds: float = Field(
        default=300.0,
        ge=0,
        description=(
            "The lookup after a create whose outcome is unknown searches "
            "[first create - margin, latest create + provider timeout + margin]. The margin "
            "covers Stripe's clock against the database's: too small and an intent stamped "
            "by a clock behind ours is missed (the create key still protects against a second "
            "intent); too large and busy accounts mean more pages."
        ),
    )
    lookup_pages_per_attempt: int = Field(
        default=100,
        ge=1,
        description=(
            "List pages (of 100 intents) one task reads before a later attempt resumes from "
            "the stored cursor. Too many: one attempt outlives its time budget (it is cut "
            "off, and resumes); too few: a busy window needs many attempts, and "
            "`MAX_ATTEMPTS` claims park the payment."
        ),
    )

    lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "A worker's lease on an operation. Too short: a healthy worker is taken over "
            "mid-call and its work is fenced off (wasted, never doubled); too long: a crashed "
            "worker's payment waits that long. Celery's soft and hard task limits are 0.6 and "
            "0.8 of it."
        ),
    )
    dispatch_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "How long an accepted record waits for a worker before the sweeper may re-queue "
            "it. Too short: a queue backlog turns into needless takeovers; too long: a lost "
            "wake-up delays the payment by this much."
        ),
    )
    sweep_interval_seconds: float = Field(default=5.0, gt=0, description="The sweeper's period.")
    sweep_batch_size: int = Field(
        default=100, ge=1, description="Records the sweeper handles per transaction."
    )
    max_attempts: int = Field(
        default=8,
        ge=1,
        description=(
            "Claims, or unknown outcomes, before an operation parks in `needs_attention` for "
            "an operator. Waits for a customer or the provider do not count."
        ),
    )

    action_recheck_seconds: float = Field(
        default=300.0,
        gt=0,
        description=(
            "How often the sweeper re-checks a payment waiting for its customer (3-D Secure) "
            "when no provider event woke it first. Too short: a provider read per waiting "
            "payment that often; too long: a payment whose events were lost shows "
            "`requires_action` that much longer. No lease is held while waiting."
        ),
    )
    action_timeout_seconds: float = Field(
        default=3600.0,
        gt=0,
        description=(
            "How long a customer has to authenticate; then the intent is canceled at the "
            "provider and the payment ends `canceled` / `authentication_timeout`. Too short: "
            "customers are cut off mid-authentication; too long: abandoned intents (and the "
            "merchant's order) stay open that long."
        ),
    )
    processing_recheck_seconds: float = Field(
        default=300.0,
        gt=0,
        description=(
            "The re-check of a payment the provider is still `processing` (an asynchronous "
            "method) when no event settled it first. Slow on purpose: such methods settle in "
            "hours or days."
        ),
    )

    # A circuit per connector account (decision 0082): a provider that keeps failing is
    # waited out instead of called, and its payments wait without spending attempts.
    circuit_failures: int = Field(
        default=20,
        ge=1,
        description=(
            "Provider failures (unknown outcomes, 5xx, timeouts; not declines, 4xx or 429) "
            "within `PAYORCH_CIRCUIT_WINDOW_SECONDS` that open a connector account's circuit. "
            "Too low: a few slow calls stop an account; too high: more payments spend "
            "attempts on a provider that is down."
        ),
    )
    circuit_window_seconds: float = Field(
        default=30.0,
        gt=0,
        description="The window in which `PAYORCH_CIRCUIT_FAILURES` failures open the circuit.",
    )
    circuit_open_seconds: float = Field(
        default=15.0,
        gt=0,
        description=(
            "How long an open circuit refuses calls before it lets probes through "
            "(half-open); a failed probe opens it for this long again. Too short: more "
            "calls to a provider that is down; too long: payments wait longer after it "
            "recovered."
        ),
    )
    circuit_probes: int = Field(
        default=2,
        ge=1,
        description=(
            "Calls a half-open circuit lets through at a time, across every worker and "
            "host; the first success closes it."
        ),
    )
    reconcile_every_seconds: float = Field(
        default=86400.0,
        ge=0,
        description=(
            "How often the sweeper reconciles every account with its provider (`payorch "
            "reconcile` over the last two days, decision 0092), counted from the last "
            "completed run in the database, whichever host ran it. 0: never (run `payorch "
            "reconcile` from a scheduler instead)."
        ),
    )
    circuit_resume_per_second: float = Field(
        default=500.0,
        ge=0,
        description=(
            "After a circuit closes, how many of its waiting payments the sweeper hands back "
            "to the workers per second, oldest first (0: all at once). Below the worker "
            "pool's speed it paces the drain after an outage; above it the pool does (the "
            "default is above one host's pool). Lower it to what a recovering provider "
            "takes when many hosts' pools together would exceed that."
        ),
    )
    circuit_wait_recheck_seconds: float = Field(
        default=300.0,
        gt=0,
        description=(
            "The safety net of a payment waiting out an open circuit: re-checked this long "
            "after it started waiting if the sweeper has not released it before (it does "
            "when the circuit half-opens or closes)."
        ),
    )

    # Retries owned by the worker: exponential backoff with full jitter and a cap.
    retry_base_seconds: float = Field(
        default=0.5,
        gt=0,
        description="Worker retry backoff: `uniform(0, min(cap, base·2ⁿ))`, full jitter.",
    )
    retry_cap_seconds: float = Field(
        default=60.0, gt=0, description="The cap of the worker's retry backoff."
    )
    max_in_task_wait_seconds: float = Field(
        default=5.0,
        ge=0,
        description=(
            "Waits up to this long happen inside the task; longer ones are stored as "
            "`next_attempt_at` for the sweeper (no broker countdown outlives a visibility "
            "timeout)."
        ),
    )

    idempotency_retention_hours: float = Field(
        default=24.0,
        gt=0,
        description=(
            "How long idempotency keys (with fingerprints and stored responses) are "
            "remembered after the payment was created and finished; then the key may start "
            "a new payment."
        ),
    )
    retention_batch_size: int = Field(
        default=500, ge=1, description="Rows purged per retention transaction."
    )
    provider_event_retention_days: float = Field(
        default=30.0,
        ge=1,
        description=(
            "Provider events (Stripe's, with their payloads) are deleted this long after "
            "they were received. They only woke a payment, which then read the provider; "
            "a payment's timeline in the console shows them until then."
        ),
    )

    secret_key: SecretStr = Field(
        default=SecretStr(DEV_SECRET_KEY),
        description=(
            "The root secret (never printed): it keys the HMAC of idempotency keys in logs, "
            "signs the console's cookies and encrypts webhook endpoint secrets at rest. "
            "Refused outside `dev` when missing, a placeholder or shorter than "
            f"{MIN_SECRET_LENGTH} characters."
        ),
    )

    previous_secret_keys: list[SecretStr] = Field(
        default_factory=list,
        description=(
            "Earlier root secrets, still accepted while they are rotated out (a JSON list, "
            'such as `["old-key"]`): stored secrets sealed under them still open, and console '
            "cookies signed with them still verify; everything new is sealed and signed with "
            "`PAYORCH_SECRET_KEY`. `payorch secrets reencrypt` moves stored secrets to the "
            "current key, after which a previous key can be dropped. Each is held to the same "
            "rules as `PAYORCH_SECRET_KEY`."
        ),
    )

    api_threads: int = Field(
        default=30,
        ge=1,
        description=(
            "Threads serving the API's synchronous handlers. Keep it at or under "
            "`DB_POOL_SIZE` + `DB_MAX_OVERFLOW`, so a burst waits in the thread pool's queue, "
            "not on the connection pool."
        ),
    )
    publish_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description=(
            "How long a publisher (the dispatcher, the sweeper; the API in `publish` mode) "
            "waits for the broker. Too long: a broker outage slows every publish; too short: "
            "a busy broker loses wake-ups (the sweeper still finds them)."
        ),
    )
    wake_up: Literal["notify", "publish"] | None = Field(
        default=None,
        description=(
            "How an accepted operation wakes a worker. `notify` (PostgreSQL only, its "
            "default): the accept's INSERT also sends a PostgreSQL NOTIFY, delivered only if "
            "it commits, and the dispatcher (in `payorch sweeper`, or `payorch dispatcher`) "
            "publishes the task, so no request waits for the broker. `publish` (SQLite's only "
            "mode, its default): the API publishes after its commit. Either way a lost "
            "wake-up is found by the sweeper once the dispatch lease expires."
        ),
    )

    poll_interval_seconds: int = Field(
        default=1,
        ge=1,
        description="`Retry-After` on a processing payment: how long a polling client waits.",
    )

    console_session_minutes: int = Field(
        default=480,
        ge=1,
        le=7 * 24 * 60,
        description=(
            "Lifetime of an ops console sign-in (a signed cookie). Too long: a forgotten "
            "signed-in browser (or a stolen cookie) keeps operator powers that long; too "
            "short: on-call people sign in again mid-incident. Revoking the ops key ends its "
            "sessions at once."
        ),
    )
    console_secure_cookie: bool | None = Field(
        default=None,
        description=(
            "The console cookies' `Secure` flag (sent over HTTPS only). Unset: on in "
            "`production`, off elsewhere (a local console on http://127.0.0.1 would never "
            "get its cookie back)."
        ),
    )

    # Merchant webhooks (orchestrator/events/).
    webhook_allow_private: bool = Field(
        default=False,
        description=(
            "Allow loopback, private and link-local webhook targets and plain `http`. "
            "Always allowed in `dev`; never in production unless the relay's network cannot "
            "reach anything internal."
        ),
    )
    webhook_allowed_ports: list[int] = Field(
        default=[443],
        min_length=1,
        description=(
            "The ports an `https` webhook URL may name (a JSON list, e.g. `[443, 8443]`). "
            "Any other port is refused outside `dev` (unless `WEBHOOK_ALLOW_PRIVATE`): a "
            "merchant's URL must not make the relay talk to a mail server or scan ports."
        ),
    )
    webhook_dns_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        le=30,
        description=(
            "How long a webhook host's name may take to resolve (at creation and at every "
            "delivery) before the URL counts as not resolving. Too short: a distant name "
            "server refuses good URLs (a delivery is retried later); too long: a slow one "
            "holds an API request or a relay thread that long."
        ),
    )
    webhook_endpoints_per_client: int = Field(
        default=16,
        ge=1,
        le=100,
        description=(
            "Webhook endpoints one API client may have (Stripe's limit is 16); a create "
            "beyond it is refused (409). Every event fans out to each subscribed endpoint, "
            "so this bounds the relay's work per event. At most 100 (what a list shows)."
        ),
    )
    webhook_retry_base_seconds: float = Field(
        default=5.0,
        gt=0,
        description="Webhook retry backoff: `uniform(0, min(cap, base·2ⁿ⁻¹))`, full jitter.",
    )
    webhook_retry_cap_seconds: float = Field(
        default=3600.0, gt=0, description="The cap of the webhook retry backoff."
    )
    webhook_retry_hours: float = Field(
        default=72.0,
        gt=0,
        description=(
            "Retry window of a delivery; an endpoint failing for all of it is disabled. Too "
            "short loses events to a merchant's weekend outage (72 hours is Stripe's)."
        ),
    )
    webhook_connect_timeout_seconds: float = Field(
        default=3.0, gt=0, description="One webhook attempt's TCP/TLS connect timeout."
    )
    webhook_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description=(
            "One webhook attempt's whole exchange after the connect: the attempt's hard "
            "deadline is connect timeout + this, from the connect's start to the answer's "
            "last byte (the relay shuts the connection then; a timeout, retried). Too long: "
            "a slow endpoint holds its relay thread longer (one thread per endpoint at most); "
            "too short: a merchant doing work before answering is retried needlessly."
        ),
    )
    webhook_response_max_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Bytes of an answer read (then the connection is dropped); 1 KiB is stored.",
    )
    webhook_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "A relay's lease on a delivery: at least twice connect + timeout (validated), or "
            "a second relay could attempt the same delivery while the first is still sending."
        ),
    )
    relay_concurrency: int = Field(
        default=8,
        ge=1,
        le=256,
        description=(
            "Deliveries one relay attempts at once (threads; `relay --once`: claimed per "
            "pass). Each thread uses one pooled connection during its short transactions: "
            "keep it under `DB_POOL_SIZE` + `DB_MAX_OVERFLOW`."
        ),
    )
    relay_idle_seconds: float = Field(
        default=0.5,
        gt=0,
        description=(
            "A relay's sleep after a pass that found nothing: about the latency of a new event."
        ),
    )
    webhook_secret_grace_hours: float = Field(
        default=24.0,
        ge=0,
        description=(
            "After a secret rotation the previous secret keeps signing (a second signature) "
            "this long."
        ),
    )
    webhook_event_retention_days: float = Field(
        default=30.0,
        gt=0,
        description=(
            "Events (with their deliveries and attempts) are purged this long after they "
            "were written, once no delivery of theirs is pending. `GET /v1/events` reaches "
            "this far back."
        ),
    )

    log_level: str = Field(default="INFO", description="The log level.")
    log_json: bool = Field(
        default=True, description="Structured JSON logs on stderr (`false`: console lines)."
    )

    @model_validator(mode="after")
    def _check(self) -> Settings:
        check_settings(self)  # orchestrator.settings_checks: what no process may start with
        return self

    @cached_property
    def task_time_limit(self) -> float:
        """Hard limit: the pool kills the task before its lease can expire under it."""
        return self.lease_seconds * 0.8

    @cached_property
    def task_soft_time_limit(self) -> float:
        """Soft limit: the task stops starting provider calls and defers its work."""
        return self.lease_seconds * 0.6

    @property
    def secret_key_ring(self) -> tuple[str, ...]:
        """The root secrets, current first: seal and sign with the first, accept any."""
        return (
            self.secret_key.get_secret_value(),
            *(key.get_secret_value() for key in self.previous_secret_keys),
        )

    @property
    def technical_cancel_threshold(self) -> int:
        """``adyen_technical_cancel_after`` as it takes effect: below ``max_attempts``, so
        the payment does not park before its technical cancel is sent and awaited (a
        configuration with few attempts still gets the cancel; it awaits it less)."""
        return max(1, min(self.adyen_technical_cancel_after, self.max_attempts - 1))

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
