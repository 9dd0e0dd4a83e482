"""Which URLs a webhook may target (SSRF).

A merchant chooses the URL and the relay calls it from inside our network, so an endpoint
could point the relay at the cloud metadata service (169.254.169.254), a database on
10.x, or the API's own admin port on 127.0.0.1.  Outside dev (unless
``PAYORCH_WEBHOOK_ALLOW_PRIVATE=true``):

* the scheme is ``https``; no credentials in the URL;
* every address the host resolves to must be globally routable: loopback, private,
  link-local, multicast, unspecified, reserved and shared (CGNAT) ranges are refused, and
  an IPv4-mapped IPv6 address is judged by its IPv4 address.

Checked twice: when the endpoint is created (literal addresses and names alike), and at
every delivery, where the name is resolved again (DNS can change after the check: "DNS
rebinding") and the connection is pinned to the address that was checked, never resolved a
second time by the HTTP client.  Redirects are never followed (``sender``), so a public URL
answering ``302 Location: http://10.0.0.1/`` reaches nothing.

Resolution goes through a ``Resolver`` (a function of host and port), the seam tests use:
no test depends on real DNS.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

import httpx

MAX_URL_LENGTH = 2048

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


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


def parse_url(raw: str, *, allow_private: bool) -> httpx.URL:
    """The shape rules (no resolution): scheme, host, no credentials, length."""
    if len(raw) > MAX_URL_LENGTH:
        raise RefusedUrl(f"The url must be at most {MAX_URL_LENGTH} characters.")
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise RefusedUrl("The url is not a valid absolute URL.") from None
    allowed = ("https", "http") if allow_private else ("https",)
    if url.scheme not in allowed:
        raise RefusedUrl(
            "The url must use https"
            + (" or http." if allow_private else " (plain http only with local targets).")
        )
    if not url.host:
        raise RefusedUrl("The url must name a host.")
    if url.userinfo:
        raise RefusedUrl(
            "The url must not carry credentials (user:password@); the signature "
            "authenticates our requests to you."
        )
    return url


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` may not be called, or None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
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
                "webhooks may only target public addresses."
            )
    return addresses[0]


def resolve_target(url: httpx.URL, *, allow_private: bool, resolver: Resolver) -> Target:
    """Resolve the host now and check every address; the connection must use the returned
    one.  With ``allow_private`` (dev, or the explicit flag) any address is allowed."""
    literal = _literal(url.host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = resolver(url.host, url.port or (443 if url.scheme == "https" else 80))
        except (OSError, UnicodeError):
            raise RefusedUrl(f"The host {url.host!r} does not resolve.") from None
    if allow_private:
        if not addresses:
            raise RefusedUrl(f"The host {url.host!r} does not resolve to any address.")
        return Target(url=url, address=addresses[0])
    return Target(url=url, address=check_addresses(url.host, addresses))


def check_new_endpoint_url(raw: str, *, allow_private: bool, resolver: Resolver) -> str:
    """The check at creation: shape, and (outside dev) where the name points today."""
    url = parse_url(raw, allow_private=allow_private)
    if not allow_private:
        resolve_target(url, allow_private=False, resolver=resolver)
    return str(url)
