"""The embedded default: every piece of the production stack, in one process, no servers.

    API        uvicorn on a free local port (a real HTTP server)
    broker     Celery on kombu's in-memory transport
    workers    a Celery worker with a thread pool, running the real task and protocol
    sweeper    the real sweeper loop, in a thread
    relay      the real webhook relay loop, in a thread, delivering to a local receiver
               (receiver.py) that verifies every signature
    database   one SQLite file (WAL; writers take turns)
    provider   the Stripe-compatible simulator on a free local port, through the real SDK
    Adyen      the Adyen-compatible simulator on another port, behind a connector account
               of a second merchant (EUR), its signed notifications sent to the API

What the embedded mode cannot do: a thread pool cannot enforce Celery's time limits
(only prefork can), and the in-memory broker dies with the process.  Neither matters to
correctness: leases and fencing do not depend on them, and the row is the truth.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from celery import Celery

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator
from devtools.adyen_simulator import parse_fault_spec as parse_adyen_fault_spec
from devtools.adyen_simulator import start_in_thread as start_adyen_in_thread
from devtools.demo.crash import CrashAfterChargeOnce
from devtools.demo.receiver import DemoReceiver
from devtools.demo.servers import ServerThread
from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from devtools.simulator.faults import parse_fault_spec
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container, bootstrap
from orchestrator.broker import CeleryPublisher
from orchestrator.db.migrate import upgrade
from orchestrator.domain.model import Role
from orchestrator.events.relay import Relay
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.services.api_keys import create_client
from orchestrator.settings import Settings
from workers.celery_app import create_celery_app
from workers.tasks import install_container

SIMULATOR_API_KEY = "sk_test_payorch_demo"
# The Adyen connector account's credentials at the Adyen simulator (the HMAC key is the
# Adyen library's public test key, hex as the Customer Area shows it).
ADYEN_API_KEY = "AQE_payorch_demo"
ADYEN_MERCHANT_ACCOUNT = "PayorchDemoECOM"
ADYEN_HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

# Short leases so a crash is recovered within seconds; the order still holds:
# provider timeout (1 s) < soft limit (0.6 x 5 s) < lease (5 s).
DEMO_SETTINGS: dict[str, Any] = {
    "lease_seconds": 5.0,
    # A storm queues hundreds of messages for a few threads: a dispatch lease shorter than
    # the queue's drain time would only produce needless (harmless) takeovers.
    "dispatch_lease_seconds": 60.0,
    "provider_timeout_seconds": 1.0,
    "provider_connect_timeout_seconds": 1.0,
    "sweep_interval_seconds": 1.0,
    "retry_base_seconds": 0.2,
    "retry_cap_seconds": 2.0,
    "max_in_task_wait_seconds": 2.0,
    "max_attempts": 10,
    # The receiver fails a share of requests: retry within a second or two.
    "webhook_retry_base_seconds": 0.2,
    "webhook_retry_cap_seconds": 2.0,
    "relay_concurrency": 4,
    "relay_idle_seconds": 0.2,
    # 3-D Secure in seconds, not the production hour: a customer who never authenticates is
    # canceled (authentication_timeout) within the demo's run, and a payment whose event
    # was missed is re-checked every second.
    "action_recheck_seconds": 1.0,
    "action_timeout_seconds": 6.0,
    "stripe_webhook_secret": "whsec_payorch_demo",
}
WEBHOOKS_IN_PATH = "/v1/providers/stripe/webhooks"
ADYEN_NOTIFICATIONS_PATH = "/v1/providers/adyen/notifications"


@dataclass(frozen=True)
class EmbeddedOptions:
    directory: Path
    workers: int = 4
    seed: int = 0
    faults: tuple[str, ...] = ()
    # The Adyen simulator's fault rules (devtools/adyen_simulator/faults.py).
    adyen_faults: tuple[str, ...] = ()
    # Crash once, after this many successful confirms; None: never.
    crash_after_confirms: int | None = 10
    # Share of webhook requests the demo's receiver answers 500 (retried by the relay).
    webhook_fail_rate: float = 0.1
    settings: dict[str, Any] = field(default_factory=dict)


class EmbeddedStack:
    """``with EmbeddedStack(options) as stack:`` gives ``stack.api_url``,
    ``stack.merchant_key``, ``stack.container`` and ``stack.simulator`` (Stripe, USD);
    ``stack.adyen_merchant_key``, ``stack.adyen_account`` (its ``ca_…``) and
    ``stack.adyen`` (the Adyen simulator) for the EUR merchant."""

    def __init__(self, options: EmbeddedOptions) -> None:
        self.options = options
        self.database_path = options.directory / "payorch.sqlite3"
        self._stop_sweeper = threading.Event()
        self._stop_relay = threading.Event()
        self._relay: Relay | None = None
        self.receiver: DemoReceiver | None = None
        self._threads: list[threading.Thread] = []
        self._api: ServerThread | None = None
        self._worker: Any = None
        self.simulator: RunningSimulator | None = None
        self.adyen: RunningAdyenSimulator | None = None
        self.container: Container | None = None
        self.crasher: CrashAfterChargeOnce | None = None
        self.api_url = ""
        self.merchant_key = ""
        self.adyen_merchant_key = ""
        self.adyen_account = ""

    def __enter__(self) -> EmbeddedStack:
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _start(self) -> None:
        options = self.options
        # Stalls must outlast the client's timeout, or "timeout after the effect" would
        # just be a slow success.
        stall = float(options.settings.get("provider_timeout_seconds", 1.0)) * 3 + 1
        self.simulator = start_in_thread(
            SimulatorConfig(
                seed=options.seed,
                faults=tuple(parse_fault_spec(spec) for spec in options.faults),
                stall_seconds=stall,
            )
        )
        self.adyen = start_adyen_in_thread(
            AdyenSimulatorConfig(
                seed=options.seed,
                faults=tuple(parse_adyen_fault_spec(spec) for spec in options.adyen_faults),
                stall_seconds=stall,
                api_keys=(ADYEN_API_KEY,),
                merchant_accounts=(ADYEN_MERCHANT_ACCOUNT,),
            )
        )
        settings = Settings(
            env="dev",
            database_url=f"sqlite:///{self.database_path}",
            broker_url="memory://",
            stripe_api_base=self.simulator.url,
            stripe_api_key=SIMULATOR_API_KEY,
            adyen_api_base=self.adyen.url,
            log_level="ERROR",
            **{**DEMO_SETTINGS, **options.settings},
        )
        upgrade(settings.database_url)
        celery_app = _embedded_celery(settings)

        def provider() -> CrashAfterChargeOnce | StripeProvider:
            real = StripeProvider.from_settings(settings)
            if options.crash_after_confirms is None:
                return real
            self.crasher = CrashAfterChargeOnce(real, after_confirms=options.crash_after_confirms)
            return self.crasher

        container = bootstrap(
            settings, publisher=CeleryPublisher(celery_app), provider_factory=provider
        )
        container.celery_app = celery_app
        self.container = container
        install_container(container)
        container.provider  # noqa: B018 - build it now, not racily in the first task

        self._worker = celery_app.WorkController(
            pool_cls="threads",
            concurrency=options.workers,
            hostname="payorch@embedded",
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            loglevel="ERROR",
        )
        self._spawn("worker", self._worker.start)
        sweeper = container.sweeper(name="embedded-sweeper")
        self._spawn("sweeper", lambda: sweeper.run(self._stop_sweeper))
        self._api = ServerThread(create_app(container)).__enter__()
        self.api_url = self._api.url
        # The simulator delivers its signed events to the API (provider events in).
        self.simulator.admin.configure_webhooks(
            self.api_url + WEBHOOKS_IN_PATH, str(DEMO_SETTINGS["stripe_webhook_secret"])
        )
        merchant = create_client(container.uow, "demo-merchant", Role.MERCHANT)
        self.merchant_key = merchant.api_key
        # The merchant's webhook endpoint (env=dev: a loopback http target is allowed).
        self.receiver = DemoReceiver(fail_rate=options.webhook_fail_rate, seed=options.seed)
        self.receiver.__enter__()
        endpoint = container.endpoint_service().create(
            merchant.client.id, url=self.receiver.url, events=["*"], description="payorch demo"
        )
        self.receiver.secrets.append(endpoint.secret)
        self._add_adyen_merchant(container)
        relay = container.relay(name="embedded-relay")
        self._relay = relay
        self._spawn("relay", lambda: relay.run(self._stop_relay))

    def _add_adyen_merchant(self, container: Container) -> None:
        """A second merchant whose only connector account is at Adyen (its default, so all
        its payments go there; the first merchant keeps the platform's Stripe account),
        created through the API as a merchant would, and the simulator told where to send
        its notifications and with which HMAC key."""
        assert self.adyen is not None and self.receiver is not None
        merchant = create_client(container.uow, "demo-merchant-eu", Role.MERCHANT)
        self.adyen_merchant_key = merchant.api_key
        created = httpx.post(
            f"{self.api_url}/v1/connector_accounts",
            headers={"Authorization": f"Bearer {merchant.api_key}"},
            json={
                "name": "Adyen EU (simulator)",
                "provider": "adyen",
                "credentials": {
                    "api_key": ADYEN_API_KEY,
                    "merchant_account": ADYEN_MERCHANT_ACCOUNT,
                    "hmac_key": ADYEN_HMAC_KEY,
                },
            },
            timeout=30,
            trust_env=False,
        )
        if created.status_code != 201:
            raise RuntimeError(f"the demo's Adyen account was refused: {created.text}")
        self.adyen_account = str(created.json()["id"])
        self.adyen.admin.configure_notifications(
            f"{self.api_url}{ADYEN_NOTIFICATIONS_PATH}/{self.adyen_account}", ADYEN_HMAC_KEY
        )
        endpoint = container.endpoint_service().create(
            merchant.client.id, url=self.receiver.url, events=["*"], description="payorch demo EU"
        )
        self.receiver.secrets.append(endpoint.secret)

    def _spawn(self, name: str, target: Any) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _stop(self) -> None:
        if self._api is not None:
            self._api.__exit__(None, None, None)
        self._stop_sweeper.set()
        self._stop_relay.set()
        if self._worker is not None:
            self._worker.stop(in_sighandler=False)
        for thread in self._threads:
            thread.join(timeout=10)
        if self._relay is not None:
            self._relay.close()
        if self.receiver is not None:
            self.receiver.__exit__(None, None, None)
        if self.simulator is not None:
            self.simulator.stop()
        if self.adyen is not None:
            self.adyen.stop()
        if self.container is not None:
            self.container.close()


def _embedded_celery(settings: Settings) -> Celery:
    app = create_celery_app(settings)
    # The thread pool cannot interrupt a running task; leases and fencing do not rely on it.
    app.conf.task_soft_time_limit = None
    app.conf.task_time_limit = None
    # kombu's in-memory transport polls its queues once a second by default, which would cap
    # each worker thread at one task per second.
    app.conf.broker_transport_options = {"polling_interval": 0.01}
    app.conf.worker_redirect_stdouts = False
    # Celery logs a traceback for the demo's simulated crash; keep it off the screen.
    logging.getLogger("celery").setLevel(logging.CRITICAL)
    return app
