"""Connection pools for the providers' HTTP clients, on urllib3: one pool per thread and
origin, one SSL context, the environment's proxy.  Both adapters send through them
(``stripe_http`` for the Stripe SDK, ``adyen_http`` for Adyen's library).
"""

from __future__ import annotations

import os
import ssl
import threading
import urllib.request
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import certifi
import urllib3

Transport = Callable[[str, str, bytes | None, dict[str, str]], urllib3.BaseHTTPResponse]
"""Sends one request (method, URL, body, headers) and answers urllib3's response, or raises
urllib3's (or the socket's) error.  Production sends through ``ThreadPools``; unit tests
pass a function that answers canned responses without a network."""


class ThreadPools:
    """urllib3 connection pools **per thread**, all sharing one SSL context.

    A thread makes one call at a time, so its own pool holds the one connection it keeps
    alive and never waits for another thread's.  One pool shared by a worker's 128 threads
    spent a large share of the worker's CPU in the pool's bookkeeping (httpx scanned every
    connection under one lock), and a pool smaller than the threads made them queue (which
    then looks like an outage).

    ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` from the environment are honoured, as the
    Stripe SDK's other clients do: an egress proxy in front of a provider is common.
    """

    def __init__(self, timeout: urllib3.Timeout) -> None:
        self._timeout = timeout
        # Loading the CA bundle costs milliseconds: once per adapter, not per thread.
        self._ssl_context = trusted_context()
        # Read once, like the SDK's other clients: {"https": "http://proxy:3128", "no": …}.
        self._proxies = urllib.request.getproxies_environment()
        self._proxy_by_origin: dict[str, str | None] = {}
        self._local = threading.local()
        # One finalizer per thread's pools.  Hazard: a pool dropped without close() leaks
        # its keep-alive socket (a ResourceWarning, an fd until the GC runs).  A thread's
        # pools are closed when it ends (the thread-local drops its holder) or at close(),
        # whichever comes first; a finalizer runs at most once.
        self._finalizers: set[weakref.finalize[Any, Any]] = set()
        self._finalizers_lock = threading.Lock()

    def proxy_for(self, url: str) -> str | None:
        """The proxy a request to ``url`` goes through, or None to go direct."""
        parsed = urllib3.util.parse_url(url)
        proxy = self._proxies.get(parsed.scheme or "")
        # proxy_bypass reads NO_PROXY (on Linux; the system's settings elsewhere).
        if not proxy or urllib.request.proxy_bypass(parsed.host or ""):
            return None
        return str(proxy)

    def __call__(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> urllib3.BaseHTTPResponse:
        # The origin is the text before the path: "https://api.stripe.com".
        scheme, _, rest = url.partition("://")
        host, slash, path = rest.partition("/")
        origin = f"{scheme}://{host}"
        if origin not in self._proxy_by_origin:
            self._proxy_by_origin[origin] = self.proxy_for(url)
        proxy = self._proxy_by_origin[origin]
        options: dict[str, Any] = {
            "body": body,
            "headers": headers,
            "retries": False,  # one layer retries: the worker's
            "redirect": False,
            "preload_content": True,
        }
        holder = self._holder()
        if proxy is not None:
            # The proxy manager adds what a proxy needs (absolute form, Host, CONNECT).
            return holder.proxied(proxy, self._pool_options()).urlopen(method, url, **options)
        pool = holder.pools.get(origin)
        if pool is None:
            pool = holder.pools[origin] = holder.direct(self._pool_options()).connection_from_url(
                url
            )
        return pool.urlopen(method, slash + path, assert_same_host=False, **options)

    def _pool_options(self) -> dict[str, Any]:
        return {
            "maxsize": 1,  # one call at a time per thread: never waits for a connection
            "block": False,
            "timeout": self._timeout,
            "retries": False,
            "ssl_context": self._ssl_context,
        }

    def _holder(self) -> ThreadHolder:
        holder: ThreadHolder | None = getattr(self._local, "holder", None)
        if holder is None:
            holder = ThreadHolder()
            self._local.holder = holder
            finalizer = weakref.finalize(holder, holder.managers_close, holder.managers)
            with self._finalizers_lock:
                self._finalizers = {f for f in self._finalizers if f.alive}
                self._finalizers.add(finalizer)
        return holder

    def close(self) -> None:
        with self._finalizers_lock:
            finalizers, self._finalizers = self._finalizers, set()
        for finalizer in finalizers:
            finalizer()


def trusted_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """The TLS context for a provider: certificates and host names verified against
    ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set (a company's CA behind an intercepting
    egress proxy), else certifi's bundle.  The same choice httpx made for the Stripe
    adapter before it moved to urllib3."""
    env = os.environ if environ is None else environ
    if env.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
    if env.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=env["SSL_CERT_DIR"])
    return ssl.create_default_context(cafile=certifi.where())


class ThreadHolder:
    """What a thread's ``threading.local`` holds: its pool managers and the direct pools taken
    from them by origin.  When the thread ends, the holder goes, and its finalizer closes the
    managers (and with them every pool and socket)."""

    __slots__ = ("__weakref__", "direct_manager", "managers", "pools", "proxy_managers")

    def __init__(self) -> None:
        self.managers: list[urllib3.PoolManager] = []  # every manager, for the finalizer
        self.direct_manager: urllib3.PoolManager | None = None
        self.pools: dict[str, urllib3.HTTPConnectionPool] = {}
        self.proxy_managers: dict[str, urllib3.ProxyManager] = {}

    def direct(self, options: dict[str, Any]) -> urllib3.PoolManager:
        if self.direct_manager is None:
            self.direct_manager = urllib3.PoolManager(num_pools=4, **options)
            self.managers.append(self.direct_manager)
        return self.direct_manager

    def proxied(self, proxy: str, options: dict[str, Any]) -> urllib3.ProxyManager:
        manager = self.proxy_managers.get(proxy)
        if manager is None:
            manager = self.proxy_managers[proxy] = urllib3.ProxyManager(
                proxy, num_pools=4, **options
            )
            self.managers.append(manager)
        return manager

    @staticmethod
    def managers_close(managers: list[urllib3.PoolManager]) -> None:
        for manager in managers:
            manager.clear()
