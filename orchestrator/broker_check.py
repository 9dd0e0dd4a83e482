"""A broker that cannot be used, said in one line before a process starts (decision 0100).

Celery's consumer retries a broker it cannot use for ever: a vhost that does not exist or
credentials it refuses fail the AMQP handshake at once, five attempts a second, and Celery
logs a ``RestartFreqExceeded`` traceback every second without end.  A typo in
``PAYORCH_BROKER_URL`` does not heal by waiting, so the long-running commands ask once,
before they start, through the same kombu connection their Celery app would open (same
URL, transport, TLS and transport options), and refuse to start with the cause.

One attempt, bounded by ``START_CHECK_TIMEOUT_SECONDS`` for the TCP connect and for each
read and write of the handshake (a port that accepts and never answers, a black-holed
address).  What counts as trouble::

    kombu.exceptions.OperationalError   a recoverable error wrapped by kombu: refused, reset,
                                        timed out, no route, a name that does not resolve
    the transport's connection and      the broker answered no: NOT_ALLOWED (no such vhost),
    channel errors                      ACCESS_REFUSED (user or password; amqp files this
                                        one under channel errors), …
    OSError                             what the socket said, unwrapped

A broker lost after the start is not this module's: Celery reconnects (decision 0100 says
what that looks like in the log).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.utils.url import maybe_sanitize_url

if TYPE_CHECKING:
    from celery import Celery

# The handshake's bound.  Too short: a broker slowed by a burst of reconnecting clients
# (after its own restart) refuses a healthy start; too long: a black-holed address holds
# the start, and its restarts, this long before saying why.
START_CHECK_TIMEOUT_SECONDS = 5.0
BROKER_HINT = (
    "check PAYORCH_BROKER_URL (host, port, user, password and virtual host), that the "
    "broker is running and reachable from here, and that the virtual host exists and the "
    "user may use it"
)
# A cause longer than this is cut: the point is one readable line.
_MAX_CAUSE = 300


@dataclass(frozen=True)
class BrokerTrouble:
    cause: str  # the transport's words, one line
    hint: str = BROKER_HINT  # what to check


def probe_broker(
    app: Celery, *, timeout: float = START_CHECK_TIMEOUT_SECONDS
) -> BrokerTrouble | None:
    """Open one connection as the app's consumer would, then close it.  None: usable."""
    connection = app.connection_for_read(
        connect_timeout=timeout,
        transport_options={"read_timeout": timeout, "write_timeout": timeout},
    )
    try:
        # max_retries=0: one attempt (kombu's own default retries for ever).
        connection.ensure_connection(max_retries=0)
    except (
        KombuOperationalError,
        OSError,
        *connection.connection_errors,
        *connection.channel_errors,
    ) as exc:
        return BrokerTrouble(_one_line(str(exc) or type(exc).__name__))
    finally:
        connection.release()
    return None


def shown_broker_url(url: str) -> str:
    """The broker URL with its password replaced by ``***``."""
    shown: str = maybe_sanitize_url(url, mask="***")
    return shown


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_CAUSE else flat[: _MAX_CAUSE - 1] + "…"
