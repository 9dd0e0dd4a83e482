"""Which webhook URLs may be called (SSRF), decided before anything connects."""

from __future__ import annotations

import threading

import pytest

from orchestrator.events.url_rules import (
    RefusedUrl,
    check_new_endpoint_url,
    parse_url,
    resolve_target,
)


def table(mapping: dict[str, list[str]]):
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        if host not in mapping:
            raise OSError("name does not resolve")
        return mapping[host]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


PUBLIC = table({"hooks.merchant.example": ["93.184.216.34"]})


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://127.0.0.1/hooks", "loopback"),
        ("https://127.9.9.9/hooks", "loopback"),
        ("https://10.0.0.1/hooks", "private"),
        ("https://192.168.1.20/hooks", "private"),
        ("https://172.16.5.4/hooks", "private"),
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("https://[::1]/hooks", "loopback"),
        ("https://[fe80::1]/hooks", "link-local"),
        ("https://[fd00::1]/hooks", "private"),
        ("https://[::ffff:10.0.0.1]/hooks", "private"),
        ("https://0.0.0.0/hooks", "unspecified"),
        ("https://224.0.0.1/hooks", "multicast"),
        ("https://100.64.0.1/hooks", "not globally routable"),
    ],
)
def test_literal_addresses_that_are_not_public_are_refused(url: str, why: str) -> None:
    with pytest.raises(RefusedUrl, match=why):
        check_new_endpoint_url(url, allow_private=False, resolver=PUBLIC)


def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    resolver = table({"internal.merchant.example": ["10.1.2.3"]})
    with pytest.raises(RefusedUrl, match=r"resolves to 10\.1\.2\.3, a private address"):
        check_new_endpoint_url(
            "https://internal.merchant.example/hooks", allow_private=False, resolver=resolver
        )


def test_a_name_with_one_private_address_among_public_ones_is_refused() -> None:
    resolver = table({"mixed.example": ["93.184.216.34", "127.0.0.1"]})
    with pytest.raises(RefusedUrl, match="loopback"):
        check_new_endpoint_url("https://mixed.example/", allow_private=False, resolver=resolver)


def test_a_public_https_url_is_accepted_and_pinned_to_the_checked_address() -> None:
    url = parse_url("https://hooks.merchant.example/payorch?x=1", allow_private=False)
    target = resolve_target(url, allow_private=False, resolver=PUBLIC)
    assert target.address == "93.184.216.34"
    assert target.host == "hooks.merchant.example"


def test_the_name_is_resolved_again_at_every_check_so_a_rebound_name_is_caught() -> None:
    answers = {"rebind.example": ["93.184.216.34"]}
    resolver = table(answers)
    url = parse_url("https://rebind.example/", allow_private=False)
    assert resolve_target(url, allow_private=False, resolver=resolver).address == "93.184.216.34"
    answers["rebind.example"] = ["169.254.169.254"]
    with pytest.raises(RefusedUrl, match="link-local"):
        resolve_target(url, allow_private=False, resolver=resolver)
    assert resolver.calls == ["rebind.example", "rebind.example"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://hooks.merchant.example/", "must use https"),
        ("ftp://hooks.merchant.example/", "must use https"),
        ("https://user:pw@hooks.merchant.example/", "credentials"),
        ("not a url", "https"),
        ("https:///nohost", "host"),
        ("https://hooks.merchant.example/" + "a" * 2100, "at most 2048"),
    ],
)
def test_malformed_or_plain_http_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(RefusedUrl, match=message):
        check_new_endpoint_url(url, allow_private=False, resolver=PUBLIC)


def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(RefusedUrl, match="does not resolve"):
        check_new_endpoint_url("https://nowhere.example/", allow_private=False, resolver=PUBLIC)


def test_allow_private_accepts_loopback_and_plain_http_without_resolving() -> None:
    resolver = table({})
    checked = check_new_endpoint_url(
        "http://127.0.0.1:8080/hooks", allow_private=True, resolver=resolver
    )
    assert checked == "http://127.0.0.1:8080/hooks"
    assert resolver.calls == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        # 6to4: a relay delivers 2002:AABB:CCDD:: to the IPv4 address AA.BB.CC.DD.
        ("https://[2002:7f00:1::1]/hooks", r"loopback \(embedded 127\.0\.0\.1\)"),
        ("https://[2002:a9fe:a9fe::1]/hooks", r"link-local \(embedded 169\.254\.169\.254\)"),
        ("https://[2002:a00:1::]/hooks", r"private \(embedded 10\.0\.0\.1\)"),
        # Teredo (2001:0::/32): the server and the (obfuscated) client are both IPv4.
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hooks", r"embedded 192\.0\.2\.45"),
        # Site-local (deprecated, still routed inside some networks).
        ("https://[fec0::1]/hooks", "site-local"),
        ("https://[fed0:1::2]/hooks", "site-local"),
    ],
)
def test_ipv6_addresses_that_reach_private_ipv4_or_site_local_ones_are_refused(
    url: str, why: str
) -> None:
    with pytest.raises(RefusedUrl, match=why):
        check_new_endpoint_url(url, allow_private=False, resolver=PUBLIC)


def test_a_name_resolving_to_a_6to4_address_of_a_private_host_is_refused() -> None:
    resolver = table({"tunnel.merchant.example": ["2002:c0a8:0101::1"]})
    with pytest.raises(RefusedUrl, match=r"embedded 192\.168\.1\.1"):
        check_new_endpoint_url(
            "https://tunnel.merchant.example/hooks", allow_private=False, resolver=resolver
        )


def test_a_6to4_address_of_a_public_host_is_accepted() -> None:
    url = "https://[2002:808:808::1]/hooks"
    assert check_new_endpoint_url(url, allow_private=False, resolver=PUBLIC) == url


@pytest.mark.parametrize("url", ["https://8.8.8.8:25/", "https://hooks.merchant.example:8443/h"])
def test_a_port_other_than_443_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(RefusedUrl, match=r"port must be one of 443 \(https\)"):
        check_new_endpoint_url(url, allow_private=False, resolver=PUBLIC)
    allowed = check_new_endpoint_url(
        url, allow_private=False, resolver=PUBLIC, allowed_ports={443, 25, 8443}
    )
    assert allowed == url


def test_port_443_written_out_is_the_default_port() -> None:
    url = "https://hooks.merchant.example:443/h"
    assert check_new_endpoint_url(url, allow_private=False, resolver=PUBLIC)


def test_allow_private_allows_any_port() -> None:
    url = "http://127.0.0.1:8001/hooks"
    assert check_new_endpoint_url(url, allow_private=True, resolver=PUBLIC) == url


def test_a_name_that_resolves_too_slowly_is_refused_after_the_timeout_not_when_it_answers() -> None:
    release = threading.Event()

    def stuck(host: str, port: int) -> list[str]:
        release.wait(30)  # a name server that does not answer
        return ["93.184.216.34"]

    try:
        with pytest.raises(RefusedUrl, match=r"did not resolve within 0\.2 s"):
            check_new_endpoint_url(
                "https://slow.merchant.example/hooks",
                allow_private=False,
                resolver=stuck,
                dns_timeout=0.2,
            )
    finally:
        release.set()


def test_the_lookup_runs_on_the_resolver_pool_not_on_the_callers_thread() -> None:
    seen: list[str] = []

    def record(host: str, port: int) -> list[str]:
        seen.append(threading.current_thread().name)
        return ["93.184.216.34"]

    check_new_endpoint_url("https://a.example/h", allow_private=False, resolver=record)
    assert seen and seen[0].startswith("dns") and seen[0] != threading.current_thread().name
