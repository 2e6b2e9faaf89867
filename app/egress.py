"""Outbound HTTP that a tenant can aim (an `http_endpoint` audit, a webhook), closed to internal
addresses (SSRF).

Two checks, both always applied:

One policy for endpoints and webhooks; the only difference is that every endpoint URL must be listed,
while a webhook to a public host needs no entry.

1. `check_url(url, allowlist)`, on the URL as written (at submit, and again on every request the
   client sends): scheme http or https, a host that is a valid name or a canonical IP address
   (`127.1`, `2130706433`, `0x7f.1` and other inet_aton spellings are refused before any resolution;
   so is a malformed IDNA label such as `xn--localhost-`), no userinfo
   (`https://api.example.com@127.0.0.1` is refused, not read as host 127.0.0.1), no encoded slashes
   or backslashes in the path (dot segments are resolved first: `/hooks/../admin` is `/admin`); then
   - `allowlist.required` (endpoints): the URL must match an entry;
   - not required (webhooks): any URL to a public host may be called; an internal one must match an
     entry, exactly as an endpoint must.
   An entry matches on scheme, host (IDNA, case-insensitive) and port (default 80/443 filled in)
   exactly, then on its path as a prefix ending on a segment boundary: `https://api.example.com/v1`
   matches `/v1` and `/v1/chat`, not `/v1x`; `https://api.example.com` is not matched by
   `https://api.example.com.attacker.test` or `https://api.example.comx`. So with the entry
   `http://127.0.0.1:18250/hooks`, `/hooks/a` may be called and `/hooksX`, `/admin`,
   `/hooks/../admin` and `http://127.1:18250/hooks` may not.
2. `egress_client(allowlist)`: an httpx client whose connections resolve the host themselves and check
   every resolved address at connect time (a public-looking name that resolves, or rebinds, to
   127.0.0.1 is refused): loopback, private, link-local (169.254.169.254, the cloud metadata address),
   shared (100.64/10), unspecified, multicast, reserved and other non-global addresses, also when
   carried inside IPv6 (IPv4-mapped, 6to4, Teredo, NAT64), are refused unless the entry that the
   request's URL matched names that address and port itself (`http://127.0.0.1:8080/hooks`; an entry
   `http://localhost:8080/` does not open 127.0.0.1, and an entry for one path opens no other). If any
   resolved address is refused, the host is. The socket connects to the checked address; TLS still
   sends SNI for, and verifies, the hostname. Redirects are not followed, proxy variables and .netrc
   are ignored, and a request whose `Host` header is not its URL's host is refused.

Interface (no web, database or queue imports, so the science package may use it):

    allow = parse_allowlist(["https://api.example.com/v1"])                       # endpoints
    hooks = parse_allowlist(["http://10.0.0.5:8080/hooks"], required=False,
                            setting="ICLAUDIT_WEBHOOK_ALLOWLIST")                   # webhooks
    check_url(url, allow)          # at submit: raises EgressRefused(reason) → answer 422 on the field
    with egress_client(allow, timeout=10) as client:      # or async_egress_client(...)
        client.post(url, json=body)  # raises EgressRefused before any byte is sent to a refused host

3. Sizes, both ways: a request body larger than `allowlist.max_body_bytes` is refused before it is sent
   (`BodyTooLarge`), and a reply is read only up to `allowlist.max_reply_bytes` (`ReplyTooLarge`: at once
   when its Content-Length says more, else as soon as the streamed bytes pass it, so no more than the limit
   is ever held). Compressed replies are not asked for (`Accept-Encoding: identity`) and one that comes
   compressed anyway is refused, since its decoded size is not bounded by the bytes read.

`parse_allowlist` raises `InvalidAllowList` (a ValueError naming the entry) for an entry that is not
an http(s) URL with a host, or has userinfo, a query or a fragment: the settings fail to load.
`EgressRefused` is not an `httpx.HTTPError`: catch it apart and never retry it; its `reason` names no
reply body, so it is safe to show the tenant.
"""

from __future__ import annotations

import contextvars
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
_BAD_IN_PATH = ("%2e", "%2f", "%5c", "\\")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
# (address, port) pairs the entry matched by the request being sent names: the only internal addresses
# its connection may reach (set by the transports around each request; empty outside one).
_OPENED: contextvars.ContextVar[frozenset[tuple[IPAddress, int]]] = contextvars.ContextVar(
    "iclaudit_egress_opened", default=frozenset()
)


def _mib(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n:,} bytes"


class InvalidAllowList(ValueError):
    """An allow-list entry that is not a plain http(s) URL."""


class EgressRefused(Exception):
    """This service will not call that URL or address; `reason` says why (safe to show the tenant)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ReplyTooLarge(EgressRefused):
    """A reply passed the bytes this service reads of one (`AllowList.max_reply_bytes`); the rest is not
    read."""

    def __init__(self, limit: int, setting: str, seen: int | None = None) -> None:
        said = f" (its Content-Length is {seen:,})" if seen is not None else ""
        super().__init__(
            f"its reply passed the {_mib(limit)} this service reads of one{said} ({setting} = {limit}); "
            "the rest was not read"
        )
        self.limit = limit


class BodyTooLarge(EgressRefused):
    """A request body larger than `AllowList.max_body_bytes`: not sent."""

    def __init__(self, size: int, limit: int, setting: str) -> None:
        super().__init__(
            f"the request body would be {size:,} bytes, above this service's {limit:,} ({setting}); not sent"
        )
        self.size, self.limit = size, limit


@dataclass(frozen=True)
class Entry:
    """One parsed allow-list entry; `path` is "" (any path) or a prefix without a trailing slash."""

    scheme: str
    host: str
    port: int
    path: str
    address: IPAddress | None  # the host, when it is an IP literal

    def matches(self, scheme: str, host: str, port: int, path: str) -> bool:
        if (scheme, host, port) != (self.scheme, self.host, self.port):
            return False
        return not self.path or path == self.path or path.startswith(self.path + "/")


@dataclass(frozen=True)
class AllowList:
    """Parsed entries; `required`: every URL must match one (endpoints), else only internal ones (webhooks).
    `setting` is the environment variable named in refusals."""

    entries: tuple[Entry, ...] = ()
    required: bool = True
    setting: str = "ICLAUDIT_ENDPOINT_ALLOWLIST"
    max_reply_bytes: int | None = None
    """Most bytes read of one reply (None: no limit); `ReplyTooLarge` past it."""
    max_body_bytes: int | None = None
    """Largest request body sent (None: no limit); `BodyTooLarge` past it."""
    reply_setting: str = "ICLAUDIT_TARGET_MAX_REPLY_BYTES"
    body_setting: str = "ICLAUDIT_TARGET_MAX_BODY_BYTES"


def _ip_literal(host: str) -> IPAddress | None:
    """The address a host string denotes by itself, including the forms inet_aton takes (2130706433)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, UnicodeEncodeError):
        return None


def _host_problem(host: str, parsed: httpx.URL) -> str | None:
    """Why `host` (lower-cased, as written) is not a host this service resolves, or None: an IPv4 address
    in any spelling but the canonical dotted quad (inet_aton's `127.1`, `2130706433`, `0x7f.0.0.1`, and
    any name whose last label is numeric, which WHATWG URL parsing reads as IPv4), or a name with a label
    that is not valid IDNA (`xn--localhost-`)."""
    if host.startswith("["):
        return None
    try:
        ipaddress.ip_address(host)
        return None  # canonical
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]) or _ip_literal(host) is not None:
        return f"host {host!r} is not a canonical IP address; write an IPv4 address as four decimal numbers (a.b.c.d)"
    try:
        _ = parsed.host  # httpx decodes an IDNA host here (and would raise while sending)
        for label in labels:
            if label.startswith("xn--"):
                idna.decode(label)
    except (UnicodeError, ValueError) as exc:
        return f"host {host!r} is not a valid host name ({exc})"
    return None


def internal_kind(address: IPAddress) -> str | None:
    """Why `address` is internal ("loopback", "private", …), or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        teredo = address.teredo
        embedded = [address.ipv4_mapped, address.sixtofour, teredo[1] if teredo else None]
        if address in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        for inner in embedded:
            if inner is not None and (kind := internal_kind(inner)):
                return kind
    if address in _METADATA:
        return "cloud metadata"
    for kind, flag in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if flag:
            return kind
    return None if address.is_global else "not globally routable"


def _origin(scheme: str, host: str | IPAddress, port: int) -> str:
    text = str(host)
    return f"{scheme}://[{text}]:{port}" if ":" in text else f"{scheme}://{text}:{port}"


def _parts(url: httpx.URL | str) -> tuple[str, str, int, str, httpx.URL]:
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise EgressRefused(f"not a valid URL ({exc})") from None
    scheme = parsed.scheme
    if scheme not in _DEFAULT_PORTS:
        raise EgressRefused(f"scheme {scheme or '(none)'!r} is not http or https")
    host = parsed.raw_host.decode("ascii").lower()
    if not host:
        raise EgressRefused("the URL has no host")
    if parsed.userinfo:
        raise EgressRefused("the URL has userinfo (user@ or user:pass@ before the host); remove it")
    if problem := _host_problem(host, parsed):
        raise EgressRefused(problem)
    port = _DEFAULT_PORTS[scheme] if parsed.port is None else parsed.port
    if not 0 < port < 65536:
        raise EgressRefused(f"port {port} is out of range")
    raw_path = parsed.raw_path.decode("ascii").split("?", 1)[0]  # dot segments resolved by httpx.URL
    if any(bad in raw_path.lower() for bad in _BAD_IN_PATH) or any(
        seg in (".", "..") for seg in raw_path.split("/")
    ):
        raise EgressRefused("the URL's path has dot segments, encoded slashes or backslashes")
    return scheme, host, port, raw_path.rstrip("/") or "/", parsed


def parse_allowlist(
    entries: list[str] | tuple[str, ...],
    *,
    required: bool = True,
    setting: str = "ICLAUDIT_ENDPOINT_ALLOWLIST",
    max_reply_bytes: int | None = None,
    max_body_bytes: int | None = None,
) -> AllowList:
    """Parse URL entries (`https://api.example.com/v1`, `http://127.0.0.1:8080/`); InvalidAllowList names
    a bad one. The byte limits bound what a client of this policy sends and reads (the module docstring)."""
    parsed = []
    for text in entries:
        try:
            scheme, host, port, path, url = _parts(str(text).strip())
        except EgressRefused as exc:
            raise InvalidAllowList(f"{setting} entry {text!r}: {exc.reason}") from None
        if url.query or url.fragment:
            raise InvalidAllowList(f"{setting} entry {text!r}: an entry has no query or fragment")
        parsed.append(Entry(scheme, host, port, "" if path == "/" else path, _ip_literal(host)))
    return AllowList(
        tuple(parsed),
        required=required,
        setting=setting,
        max_reply_bytes=max_reply_bytes,
        max_body_bytes=max_body_bytes,
    )


def check_url(url: httpx.URL | str, allowlist: AllowList) -> Entry | None:
    """Refuse (EgressRefused) a URL this service must not call; return the entry it matched, if any.
    An internal address (an IP literal here; a name that resolves to one, at connect time) is called only
    through an entry that the whole URL matches: scheme, host, port and path prefix."""
    scheme, host, port, path, _ = _parts(url)
    entry = next((e for e in allowlist.entries if e.matches(scheme, host, port, path)), None)
    if entry is None and allowlist.required:
        raise EgressRefused(
            f"{_origin(scheme, host, port)}{path} is not in this service's allow-list; an operator adds "
            f"the URL to {allowlist.setting} (a JSON list of URLs, matched on scheme, host and port "
            "exactly, then on the path as a prefix)"
        )
    address = _ip_literal(host)
    if address is not None and (kind := internal_kind(address)) and entry is None:
        raise EgressRefused(
            f"{address} is a {kind} address; this service calls one only at a URL that {allowlist.setting} "
            "lists (scheme, host and port exactly, then the path as a prefix)"
        )
    return entry


def _opened_by(entry: Entry | None) -> frozenset[tuple[IPAddress, int]]:
    return frozenset({(entry.address, entry.port)}) if entry is not None and entry.address else frozenset()


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
CLIENT_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "expect",
        "http2-settings",
    }
)
"""Headers the HTTP client owns (the URL's host, hop-by-hop and message framing): a caller's value would
desynchronise the request (a Transfer-Encoding beside a Content-Length) or reach a proxy (Proxy-*)."""


def header_refused(name: str) -> str | None:
    """Why a caller may not set header `name` on an outgoing request (in words naming it), or None."""
    if not _HEADER_NAME.fullmatch(name):
        return f"{name!r} is not a valid header name (letters, digits and !#$%&'*+.^_`|~- only)"
    low = name.lower()
    if low == "host":
        return "Host may not be set; it is always the URL's host."
    if low in CLIENT_HEADERS or low.startswith("proxy-"):
        return f"{name} may not be set: the HTTP client sets it (a hop-by-hop or message-framing header)."
    return None


def _check_request(request: httpx.Request, allowlist: AllowList) -> frozenset[tuple[IPAddress, int]]:
    """check_url on the request's URL and its Host header; the internal addresses it may reach."""
    entry = check_url(request.url, allowlist)
    sent_host = request.headers.get("host")
    if sent_host is not None and sent_host.lower() != request.url.netloc.decode("ascii").lower():
        raise EgressRefused("the Host header may not be set: it is always the URL's host")
    return _opened_by(entry)


def checked_addresses(host: str, port: int, allowlist: AllowList) -> list[IPAddress]:
    """Resolve `host` and return its addresses, refusing the host if any of them is internal and not named
    by the entry the request being sent matched."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    return _vet(host, port, [info[4][0] for info in infos], allowlist)


def _vet(host: str, port: int, found: list[Any], allowlist: AllowList) -> list[IPAddress]:
    addresses: list[IPAddress] = []
    for text in found:
        address = ipaddress.ip_address(str(text).split("%", 1)[0])
        kind = internal_kind(address)
        if kind and (address, port) not in _OPENED.get():
            raise EgressRefused(
                f"{host} resolves to a {kind} address; this service calls one only at a URL that "
                f"{allowlist.setting} lists with that address as its host"
            )
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise httpcore.ConnectError(f"{host} has no address")
    return addresses


class _GuardedBackend(httpcore.SyncBackend):
    """Resolves the host, vets every address, then connects to a vetted address (not the name)."""

    def __init__(self, allowlist: AllowList) -> None:
        self._allowlist = allowlist

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        error: Exception | None = None
        for address in checked_addresses(host, port, self._allowlist):
            try:
                return super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error


class _AsyncGuardedBackend(httpcore.AnyIOBackend):
    def __init__(self, allowlist: AllowList) -> None:
        self._allowlist = allowlist

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        import anyio

        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        error: Exception | None = None
        for address in _vet(host, port, [info[4][0] for info in infos], self._allowlist):
            try:
                return await super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error


def _pool_options(verify: bool | str, retries: int, limits: httpx.Limits) -> dict[str, Any]:
    return {
        "ssl_context": httpx.create_ssl_context(verify=verify, trust_env=False),
        "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry,
        "retries": retries,
    }


def _check_sizes(request: httpx.Request, allowlist: AllowList) -> None:
    """Refuse a body above the policy's limit (before any byte goes out) and ask for an uncompressed reply."""
    limit = allowlist.max_body_bytes
    size = int(request.headers.get("content-length") or 0)
    if limit is not None and size > limit:
        raise BodyTooLarge(size, limit, allowlist.body_setting)
    if allowlist.max_reply_bytes is not None:
        request.headers["Accept-Encoding"] = "identity"


def _reply_problem(response: httpx.Response, allowlist: AllowList) -> EgressRefused | None:
    """Why `response` is refused before a byte of it is read: its Content-Length says more than the policy
    reads, or it is compressed (its decoded size is not bounded by the bytes read); None if it is not."""
    limit = allowlist.max_reply_bytes
    if limit is None:
        return None
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    said = response.headers.get("content-length", "")
    if encoding not in ("", "identity"):
        return EgressRefused(
            f"its reply is compressed ({encoding}) though this service asked for none; compressed replies are "
            "not read (their decoded size is unbounded)"
        )
    if said.isdigit() and int(said) > limit:
        return ReplyTooLarge(limit, allowlist.reply_setting, int(said))
    return None


class _BoundedStream(httpx.SyncByteStream):
    """A reply's bytes, ReplyTooLarge as soon as they pass `limit` (what came before is all that is held)."""

    def __init__(self, stream: Any, limit: int, setting: str) -> None:
        self._stream, self._limit, self._setting = stream, limit, setting

    def __iter__(self) -> Any:
        seen = 0
        for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise ReplyTooLarge(self._limit, self._setting)
            yield chunk

    def close(self) -> None:
        self._stream.close()


class _AsyncBoundedStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any, limit: int, setting: str) -> None:
        self._stream, self._limit, self._setting = stream, limit, setting

    async def __aiter__(self) -> Any:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise ReplyTooLarge(self._limit, self._setting)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class EgressTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool with the guarded backend; every request's URL is checked.
    (Sets the pool itself instead of calling HTTPTransport.__init__, which has no backend parameter.)"""

    def __init__(
        self,
        allowlist: AllowList,
        *,
        retries: int = 0,
        verify: bool | str = True,
        limits: httpx.Limits | None = None,
    ) -> None:
        self._allowlist = allowlist
        self._pool = httpcore.ConnectionPool(
            network_backend=_GuardedBackend(allowlist),
            **_pool_options(verify, retries, limits or httpx.Limits(max_connections=10)),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _check_sizes(request, self._allowlist)
        token = _OPENED.set(_check_request(request, self._allowlist))
        try:
            response = super().handle_request(request)
        finally:
            _OPENED.reset(token)
        limit = self._allowlist.max_reply_bytes
        if limit is not None:
            if problem := _reply_problem(response, self._allowlist):
                response.close()
                raise problem
            response.stream = _BoundedStream(response.stream, limit, self._allowlist.reply_setting)
        return response


class AsyncEgressTransport(httpx.AsyncHTTPTransport):
    def __init__(
        self,
        allowlist: AllowList,
        *,
        retries: int = 0,
        verify: bool | str = True,
        limits: httpx.Limits | None = None,
    ) -> None:
        self._allowlist = allowlist
        self._pool = httpcore.AsyncConnectionPool(
            network_backend=_AsyncGuardedBackend(allowlist),
            **_pool_options(verify, retries, limits or httpx.Limits(max_connections=10)),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        _check_sizes(request, self._allowlist)
        token = _OPENED.set(_check_request(request, self._allowlist))
        try:
            response = await super().handle_async_request(request)
        finally:
            _OPENED.reset(token)
        limit = self._allowlist.max_reply_bytes
        if limit is not None:
            if problem := _reply_problem(response, self._allowlist):
                await response.aclose()
                raise problem
            response.stream = _AsyncBoundedStream(response.stream, limit, self._allowlist.reply_setting)
        return response


def egress_client(
    allowlist: AllowList,
    *,
    timeout: float = 10.0,
    retries: int = 0,
    headers: dict[str, str] | None = None,
    verify: bool | str = True,
) -> httpx.Client:
    """A client that calls only what `allowlist` permits (see the module docstring); redirects are not
    followed (a 3xx comes back as the response). `retries` = connection retries (httpcore). A header the
    client owns (`header_refused`) is refused here, a Host header when a request is sent."""
    for name in headers or {}:
        if name.lower() != "host" and (refused := header_refused(name)) is not None:
            raise EgressRefused(refused)
    return httpx.Client(
        transport=EgressTransport(allowlist, retries=retries, verify=verify),
        timeout=timeout,
        headers=headers,
        follow_redirects=False,
        trust_env=False,
    )


def async_egress_client(
    allowlist: AllowList,
    *,
    timeout: float = 10.0,
    retries: int = 0,
    headers: dict[str, str] | None = None,
    verify: bool | str = True,
) -> httpx.AsyncClient:
    """The async twin of `egress_client`."""
    return httpx.AsyncClient(
        transport=AsyncEgressTransport(allowlist, retries=retries, verify=verify),
        timeout=timeout,
        headers=headers,
        follow_redirects=False,
        trust_env=False,
    )
