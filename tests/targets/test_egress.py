"""app/egress.py: the allow-list's matching, the URL check, and the client's connect-time address check
against a real HTTP server on 127.0.0.1 that counts what reaches it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from app.config import Settings
from app.egress import (
    EgressRefused,
    InvalidAllowList,
    async_egress_client,
    check_url,
    egress_client,
    internal_kind,
    parse_allowlist,
)
from testkit.internal_server import internal_server

API = parse_allowlist(["https://api.example.com"])


@pytest.fixture
def internal() -> Iterator[tuple[int, list[str]]]:
    with internal_server() as served:
        yield served


# --- the bypasses, each refused by the URL check ---------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://api.example.com.attacker.test/v1", "not in this service's allow-list"),
        ("https://api.example.com@127.0.0.1:8080/", "userinfo"),
        ("https://api.example.com:1@169.254.169.254/", "userinfo"),
        ("https://api.example.comx/", "not in this service's allow-list"),
        ("http://api.example.com/", "not in this service's allow-list"),  # scheme differs
        ("https://api.example.com:8443/", "not in this service's allow-list"),  # port differs
        ("ftp://api.example.com/", "not http or https"),
        ("https://api.example.com/v1/%2e%2e/admin", "dot segments"),
    ],
)
def test_bypass_is_refused(url: str, why: str) -> None:
    with pytest.raises(EgressRefused, match=why):
        check_url(url, API)


def test_exact_host_and_segment_prefix_match() -> None:
    allow = parse_allowlist(["https://API.example.com:443/v1/"])
    assert check_url("https://api.example.com/v1", allow) is not None
    assert check_url("https://api.example.com/v1/chat?x=1", allow) is not None
    for url in ("https://api.example.com/v1x", "https://api.example.com/", "https://api.example.com/v2/v1"):
        with pytest.raises(EgressRefused):
            check_url(url, allow)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("100.64.0.1", "not globally routable"),
        ("0.0.0.0", "unspecified"),
        ("224.0.1.1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("2002:7f00:1::", "loopback"),  # 6to4 carrying 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 carrying 169.254.169.254
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
    ],
)
def test_internal_addresses(address: str, kind: str | None) -> None:
    import ipaddress

    assert internal_kind(ipaddress.ip_address(address)) == kind


def test_ip_literal_hosts_need_an_entry_naming_them() -> None:
    hooks = parse_allowlist(
        ["http://127.0.0.1:8080/hooks"], required=False, setting="ICLAUDIT_WEBHOOK_ALLOWLIST"
    )
    assert check_url("https://hooks.example.org/in", hooks) is None  # public: no entry needed
    assert check_url("http://127.0.0.1:8080/hooks/a", hooks) is not None
    for url in ("http://127.0.0.1:8081/hooks", "http://[::ffff:a9fe:a9fe]/"):
        with pytest.raises(EgressRefused, match="ICLAUDIT_WEBHOOK_ALLOWLIST"):
            check_url(url, hooks)
    with pytest.raises(EgressRefused, match="not a canonical IP address"):  # refused before resolution
        check_url("http://2130706433/", hooks)


@pytest.mark.parametrize(
    "entry", ["ftp://x/", "https://user@x/", "https://x/?q=1", "x.example.com", "http://x:0/"]
)
def test_invalid_entries_fail_at_settings_load(entry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidAllowList):
        parse_allowlist([entry])
    monkeypatch.setenv("ICLAUDIT_ENDPOINT_ALLOWLIST", f'["{entry}"]')
    with pytest.raises(ValueError, match="ICLAUDIT_ENDPOINT_ALLOWLIST entry"):
        Settings()


# --- the client: resolved addresses checked at connect time, no redirects ------------------------------


def test_name_resolving_to_loopback_is_refused_at_connect(internal) -> None:
    port, hits = internal
    allow = parse_allowlist([f"http://localhost:{port}/"])
    check_url(f"http://localhost:{port}/secret", allow)  # the URL is listed ...
    with egress_client(allow) as client, pytest.raises(EgressRefused, match="loopback"):
        client.get(f"http://localhost:{port}/secret")  # ... but it resolves to 127.0.0.1
    assert hits == []


def test_async_client_checks_resolved_addresses_too(internal) -> None:
    port, hits = internal

    async def call() -> None:
        async with async_egress_client(parse_allowlist([f"http://localhost:{port}/"])) as client:
            await client.get(f"http://localhost:{port}/secret")

    with pytest.raises(EgressRefused, match="loopback"):
        asyncio.run(call())
    assert hits == []


def test_an_address_named_exactly_is_called_and_redirects_are_not_followed(internal) -> None:
    port, hits = internal
    allow = parse_allowlist([f"http://127.0.0.1:{port}/redirect"])
    with egress_client(allow) as client:
        reply = client.get(f"http://127.0.0.1:{port}/redirect")
        assert reply.status_code == 302 and hits == ["/redirect"]  # not followed to /secret
        with pytest.raises(EgressRefused, match="allow-list"):  # every request's URL is checked
            client.get(f"http://127.0.0.1:{port}/secret")
    assert hits == ["/redirect"]


def test_environment_proxies_are_ignored(internal, monkeypatch: pytest.MonkeyPatch) -> None:
    port, hits = internal
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # would swallow the call if it were used
    with egress_client(parse_allowlist([f"http://127.0.0.1:{port}/"])) as client:
        assert client.get(f"http://127.0.0.1:{port}/ok").status_code == 200
    assert hits == ["/ok"]


def test_refusal_is_not_an_httpx_error() -> None:
    """Callers retry httpx errors; a refusal must not be retried."""
    assert not issubclass(EgressRefused, httpx.HTTPError)


# --- issue 20 M1: the webhook allow-list holds as the endpoint allow-list does --------------------------


def test_an_internal_address_is_called_only_through_an_entry_the_whole_url_matches() -> None:
    hooks = parse_allowlist(
        ["http://127.0.0.1:18250/hooks"], required=False, setting="ICLAUDIT_WEBHOOK_ALLOWLIST"
    )
    assert check_url("http://127.0.0.1:18250/hooks/in", hooks) is not None
    for url in (
        "http://127.0.0.1:18250/admin",
        "http://127.0.0.1:18250/hooksX",
        "http://127.0.0.1:18250/hooks/../admin",  # resolved to /admin before matching
        "https://127.0.0.1:18250/hooks",
    ):
        with pytest.raises(EgressRefused, match="ICLAUDIT_WEBHOOK_ALLOWLIST lists"):
            check_url(url, hooks)
    for url in ("http://127.1:18250/hooks", "http://0x7f.0.0.1:18250/hooks", "http://127.0.0.1.:18250/hooks"):
        with pytest.raises(EgressRefused, match="not a canonical IP address"):
            check_url(url, hooks)
    with pytest.raises(EgressRefused, match="not a valid host name"):
        check_url("http://xn--localhost-:18252/x", hooks)


def test_a_name_resolving_to_a_listed_address_opens_nothing(internal) -> None:
    """The entry names 127.0.0.1 for /hooks; `localhost` resolves there but is another host: refused at
    connect time for every path, while the entry's own URL is called."""
    port, hits = internal
    hooks = parse_allowlist([f"http://127.0.0.1:{port}/hooks"], required=False, setting="X")
    with egress_client(hooks) as client:
        for url in (f"http://localhost:{port}/admin", f"http://localhost:{port}/hooks"):
            with pytest.raises(EgressRefused, match="resolves to a loopback address"):
                client.post(url)
        assert client.post(f"http://127.0.0.1:{port}/hooks/in").status_code == 200
    assert hits == ["/hooks/in"]


def test_host_header_cannot_be_overridden(internal) -> None:
    port, hits = internal
    allow = parse_allowlist([f"http://127.0.0.1:{port}/"])
    with (
        egress_client(allow, headers={"Host": "admin.internal"}) as client,
        pytest.raises(EgressRefused, match="Host header"),
    ):
        client.get(f"http://127.0.0.1:{port}/ok")
    assert hits == []
