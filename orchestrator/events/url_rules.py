"""Which URLs a webhook may target (SSRF).

A merchant chooses the URL and the relay calls it from inside our network, so an endpoint
could point the relay at the cloud metadata service (169.254.169.254), a database on
10.x, or the API's own admin port on 127.0.0.1.  Outside dev (unless
``PAYORCH_WEBHOOK_ALLOW_PRIVATE=true``):

* the scheme is ``https``; no credentials in the URL; the port is 443 unless
  ``PAYORCH_WEBHOOK_ALLOWED_PORTS`` lists it (``https://8.8.8.8:25/`` would make the relay
  a port scanner or an SMTP client);
* every address the host resolves to must be globally routable: loopback, private,
  link-local, site-local (``fec0::/10``), multicast, unspecified, reserved and shared
  (CGNAT) ranges are refused, and an IPv6 address that carries an IPv4 address (mapped
  ``::ffff:0:0/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``) is refused when that IPv4
  address is (a 6to4 relay would deliver ``2002:7f00:1::`` to 127.0.0.1).

Checked twice: when the endpoint is created (literal addresses and names alike), and at
every delivery, where the name is resolved again (DNS can change after the check: "DNS
rebinding") and the connection is pinned to the address that was checked, never resolved a
second time by the HTTP client.  Redirects are never followed (``sender``), so a public URL
answering ``302 Location: http://10.0.0.1/`` reaches nothing.

Resolution goes through a ``Resolver`` (a function of host and port), the seam tests use:
no test depends on real DNS.  It runs on a small pool of its own threads and is waited
for at most ``PAYORCH_WEBHOOK_DNS_TIMEOUT_SECONDS``: ``getaddrinfo`` has no timeout, and a
slow name server must not hold an API request (or a relay thread) for its own 30 seconds
or more.  A lookup that outlives the wait finishes on its pool thread, unused; the pool is
small, so stuck lookups cannot multiply threads, only time out.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import httpx

MAX_URL_LENGTH = 2048
DEFAULT_ALLOWED_PORTS = frozenset({443})
# Too short: a healthy but distant name server makes a good URL unresolvable (creation
# refused, a delivery retried later); too long: a slow one holds the request that long.
DEFAULT_DNS_TIMEOUT_SECONDS = 2.0
# Lookups in flight at once, per process; more wait for a thread (within their timeout).
_RESOLVER_THREADS = 4
_lookups = ThreadPoolExecutor(max_workers=_RESOLVER_THREADS, thread_name_prefix="dns")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


# Said with every refusal that the flag would lift: a developer pointing a webhook at
# 127.0.0.1 outside dev must learn the setting exists (it is documented, so naming it gives
# nothing away), and that it is not for production.
ALLOW_PRIVATE_HINT = (
    "For local testing, PAYORCH_WEBHOOK_ALLOW_PRIVATE=true allows private and loopback "
    "targets and plain http (never in production)."
)


class RefusedUrl(ValueError):
    """The URL may not be a webhook target; the message says why and what to do."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host``, in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    return addresses


@dataclass(frozen=True)
class Target:
    """A checked URL and the address the connection must use."""

    url: httpx.URL
    address: str

    @property
    def host(self) -> str:
        return self.url.host


def parse_url(
    raw: str, *, allow_private: bool, allowed_ports: Collection[int] = DEFAULT_ALLOWED_PORTS
) -> httpx.URL:
    """The shape rules (no resolution): scheme, host, port, no credentials, length.  With
    ``allow_private`` (dev, or the explicit flag) any port is allowed, as is http."""
    if len(raw) > MAX_URL_LENGTH:
        raise RefusedUrl(f"The url must be at most {MAX_URL_LENGTH} characters.")
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise RefusedUrl("The url is not a valid absolute URL.") from None
    allowed = ("https", "http") if allow_private else ("https",)
    if url.scheme not in allowed:
        raise RefusedUrl(
            "The url must use https or http."
            if allow_private
            else f"The url must use https. {ALLOW_PRIVATE_HINT}"
        )
    if not url.host:
        raise RefusedUrl("The url must name a host.")
    if url.userinfo:
        raise RefusedUrl(
            "The url must not carry credentials (user:password@); the signature "
            "authenticates our requests to you."
        )
    port = url.port or 443
    if not allow_private and url.scheme == "https" and port not in allowed_ports:
        listed = ", ".join(str(p) for p in sorted(allowed_ports))
        raise RefusedUrl(
            f"The url's port must be one of {listed} (https); {port} is not allowed. "
            "PAYORCH_WEBHOOK_ALLOWED_PORTS lists the ports allowed."
        )
    return url


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries, where a tunnel or relay would send it:
    mapped (``::ffff:a.b.c.d``), 6to4 (``2002:AABB:CCDD::``) and Teredo (server and
    client of ``2001:0::/32``)."""
    found = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` may not be called, or None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        else:
            for carried in embedded_ipv4(address):
                reason = forbidden_reason(carried)
                if reason is not None:
                    return f"{reason} (embedded {carried})"
            if address.is_site_local:
                return "site-local"
    checks = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    )
    for name, hit in checks:
        if hit:
            return name
    if not address.is_global:
        return "not globally routable"
    return None


def check_addresses(host: str, addresses: list[str]) -> str:
    """The first address, when every one is allowed (a name with one private address among
    public ones is refused: the client library may pick any of them)."""
    if not addresses:
        raise RefusedUrl(f"The host {host!r} does not resolve to any address.")
    for raw in addresses:
        address = ipaddress.ip_address(raw.split("%")[0])
        reason = forbidden_reason(address)
        if reason is not None:
            raise RefusedUrl(
                f"The url's host {host!r} resolves to {address}, a {reason} address; "
                f"webhooks may only target public addresses. {ALLOW_PRIVATE_HINT}"
            )
    return addresses[0]


def resolve(host: str, port: int, *, resolver: Resolver, timeout: float) -> list[str]:
    """``resolver(host, port)`` on the lookup pool, waited for at most ``timeout``."""
    lookup = _lookups.submit(resolver, host, port)
    try:
        return lookup.result(timeout=timeout)
    except FutureTimeout:
        lookup.cancel()  # still queued: never runs; running: finishes unused
        raise RefusedUrl(
            f"The host {host!r} did not resolve within {timeout:g} s; try again later."
        ) from None
    except (OSError, UnicodeError):
        raise RefusedUrl(f"The host {host!r} does not resolve.") from None


def resolve_target(
    url: httpx.URL,
    *,
    allow_private: bool,
    resolver: Resolver,
    timeout: float = DEFAULT_DNS_TIMEOUT_SECONDS,
) -> Target:
    """Resolve the host now and check every address; the connection must use the returned
    one.  With ``allow_private`` (dev, or the explicit flag) any address is allowed."""
    literal = _literal(url.host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = resolve(url.host, port, resolver=resolver, timeout=timeout)
    if allow_private:
        if not addresses:
            raise RefusedUrl(f"The host {url.host!r} does not resolve to any address.")
        return Target(url=url, address=addresses[0])
    return Target(url=url, address=check_addresses(url.host, addresses))


def check_new_endpoint_url(
    raw: str,
    *,
    allow_private: bool,
    resolver: Resolver,
    allowed_ports: Collection[int] = DEFAULT_ALLOWED_PORTS,
    dns_timeout: float = DEFAULT_DNS_TIMEOUT_SECONDS,
) -> str:
    """The check at creation: shape, and (outside dev) where the name points today."""
    url = parse_url(raw, allow_private=allow_private, allowed_ports=allowed_ports)
    if not allow_private:
        resolve_target(url, allow_private=False, resolver=resolver, timeout=dns_timeout)
    return str(url)
