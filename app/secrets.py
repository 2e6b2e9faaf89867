"""Target credentials by reference: a request names a secret, the server holds its value.

`"headers": {"Authorization": {"secret": "TARGET_KEY"}}` is stored as that reference. The value is looked
up only when the audit calls its target, first in the tenant's secrets file
(`ICLAUDIT_SECRETS_DIR/<tenant name>.json`, a JSON object of name → value), then in the server's environment
under a fixed prefix (`ICLAUDIT_SECRET_TARGET_KEY`), so a tenant can read no other variable. An
environment secret is the operator's: a tenant may send it only when ICLAUDIT_SECRETS_GRANTS grants it that
name (`{"TARGET_KEY": ["acme"]}`; `"*"` grants it to every tenant), and only to the URLs that
ICLAUDIT_ENDPOINT_ALLOWLIST lets audits call. An unknown and an ungranted name get the same answer.

A value is checked when it is resolved (`problem`): it must be printable ASCII without leading or trailing
whitespace, so that no HTTP library refuses it with a message that quotes it. Every value resolved in a
process is also remembered by `SCRUBBER`, which replaces it (and its repr, JSON, stripped, URL- and
base64-encoded forms) in every log record, stored row, audit error and result, and webhook body.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

ENV_PREFIX = "ICLAUDIT_SECRET_"
NAME_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
ALL_TENANTS = "*"
_TENANT_FILE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")
# Header names whose literal value is a credential: those go by reference (a 422 at submit otherwise).
CREDENTIAL_HEADER = re.compile(
    r"auth|token|secret|passw|key|cookie|session|subscription|signature|credential|bearer",
    re.IGNORECASE,
)
# Printable ASCII, no whitespace at either end: what every HTTP library sends as a header value unchanged.
_VALID_VALUE = re.compile(r"[!-~](?:[ -~]*[!-~])?")


class MissingSecret(LookupError):
    """The named secret is not set for this tenant (or not granted to it: the same message); it names the
    secret, never a value."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"secret {name!r} is not set for this tenant ({name} in the tenant's secrets file under "
            f"ICLAUDIT_SECRETS_DIR, or {ENV_PREFIX}{name} granted to it by ICLAUDIT_SECRETS_GRANTS)"
        )
        self.name = name


class InvalidSecret(MissingSecret):
    """The named secret is set but its value cannot go in a header; the message says why, never the value."""

    def __init__(self, name: str, problem: str) -> None:
        LookupError.__init__(
            self,
            f"secret {name!r} is set on this server but is not a valid header value ({problem}); "
            "the operator must store it without them",
        )
        self.name = name
        self.problem = problem


def problem(value: str) -> str | None:
    """Why `value` cannot be sent as an HTTP header value, in words that do not quote it; None when it can."""
    if _VALID_VALUE.fullmatch(value):
        return None
    if not value:
        return "it is empty"
    if value != value.strip() or value[:1].isspace() or value[-1:].isspace():
        return "it starts or ends with whitespace: a newline, space or tab"
    if any(c in "\r\n" for c in value):
        return "it holds a line break (CR or LF)"
    if not value.isascii():
        return "it holds a non-ASCII character"
    return "it holds a control character"


def _tenant_file(secrets_dir: Path | None, tenant: str | None) -> dict[str, str]:
    if secrets_dir is None or tenant is None or not _TENANT_FILE.match(tenant):
        return {}
    path = Path(secrets_dir) / f"{tenant}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        # the operator's file is unreadable: say so without its content
        raise MissingSecret("<tenant secrets file unreadable>") from None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def granted(grants: Mapping[str, Collection[str]] | None, name: str, tenant: str | None) -> bool:
    """May `tenant` use the environment secret `name`? `grants` None: a trusted local run (library, tests)
    that may use every one; otherwise only a tenant named in its grant (or `*`)."""
    if grants is None:
        return True
    allowed = grants.get(name, ())
    return ALL_TENANTS in allowed or (tenant is not None and tenant in allowed)


def resolver(
    *,
    tenant: str | Callable[[], str | None] | None,
    secrets_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    grants: Mapping[str, Collection[str]] | None = None,
) -> Callable[[str], str]:
    """name → value for one tenant (its name, or a function giving it when first needed): the tenant's
    file, then `ICLAUDIT_SECRET_<name>` if `grants` grants it to the tenant (`grants` None: a trusted local
    run, every one). Raises MissingSecret (unknown and ungranted alike) or InvalidSecret; every value it
    reads is remembered by SCRUBBER."""
    env = os.environ if environ is None else environ

    def who() -> str | None:
        return tenant() if callable(tenant) else tenant

    def resolve(name: str) -> str:
        if not re.match(NAME_PATTERN, name):
            raise MissingSecret(name)
        value = None
        if secrets_dir is not None:
            value = _tenant_file(secrets_dir, who()).get(name)
        if value is None and granted(grants, name, who() if grants is not None else None):
            value = env.get(ENV_PREFIX + name)
        if value is None:
            raise MissingSecret(name)
        SCRUBBER.add(value)
        if (why := problem(value)) is not None:
            raise InvalidSecret(name, why)
        return value

    return resolve


def credential_header(name: str) -> bool:
    """A header whose literal value would be a credential (Authorization, X-Api-Key, Ocp-Apim-Subscription-Key,
    X-Signature, Cookie, …)."""
    return bool(CREDENTIAL_HEADER.search(name))


# --- the scrubber ------------------------------------------------------------------------------------------

MASK = "[secret]"
MIN_SCRUBBED = 8
"""Shorter forms are not replaced (a short value would mask ordinary words and numbers); a credential worth
the name is longer."""


def _bases(value: str) -> set[str]:
    return {value, value.strip(), *(part for part in value.split() if len(part) >= 8)}


def anchors(value: str) -> set[str]:
    """Substrings of which every form (`forms`) contains at least one: each base's longest run of ASCII
    letters and digits (no encoding changes those), or the form itself when that run is short, and the
    base64 forms. A text with none of them holds no form, checked with fast substring search."""
    out: set[str] = set()
    for v in _bases(value):
        runs = re.findall(r"[A-Za-z0-9]+", v)
        core = max(runs, key=len) if runs else ""
        if len(core) >= 6:
            out.add(core)
        else:
            out |= {f for f in forms_of(v) if len(f) >= MIN_SCRUBBED}
        out.add(base64.b64encode(v.encode("utf-8", "surrogatepass")).decode())
    return {a for a in out if len(a) >= 6}


def forms(value: str) -> set[str]:
    """The ways `value` shows up in text: itself and stripped, its repr (str and UTF-8 bytes), its JSON
    string, URL-encoded, base64, each whitespace-separated part of 8+ characters (the token of
    `Bearer <token>`), and the JSON string of each of those (a repr inside a JSON log line)."""
    out: set[str] = set()
    for v in _bases(value):
        out |= forms_of(v)
    out |= {json.dumps(form)[1:-1] for form in list(out)}
    return {form for form in out if len(form) >= MIN_SCRUBBED}


def forms_of(v: str) -> set[str]:
    """One base's forms (`forms` adds their JSON strings)."""
    raw = v.encode("utf-8", "surrogatepass")
    return {
        v,
        repr(v)[1:-1],
        repr(raw)[2:-1],
        json.dumps(v)[1:-1],
        json.dumps(v, ensure_ascii=False)[1:-1],
        quote(v, safe=""),
        quote_plus(v, safe=""),
        base64.b64encode(raw).decode(),
        raw.decode("latin-1"),
    }


class Scrubber:
    """The secret values this process has resolved, and `text`/`value` that mask them. Adding the first
    one makes every log record of the process pass through it (a log record factory)."""

    def __init__(self) -> None:
        self._forms: set[str] = set()
        self._anchors: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        new = forms(value) - self._forms
        if not new:
            return
        with self._lock:
            self._forms |= new
            self._anchors = tuple(set(self._anchors) | anchors(value))
            ordered = sorted(self._forms, key=len, reverse=True)  # the longest form first
            self._pattern = re.compile("|".join(map(re.escape, ordered)))
        _install_log_factory()

    def add_environment(self, environ: Mapping[str, str] | None = None) -> None:
        """Remember every `ICLAUDIT_SECRET_*` value of the environment (a process that may write what
        another process resolved: the API's webhook bodies)."""
        env = os.environ if environ is None else environ
        for key, value in env.items():
            if key.startswith(ENV_PREFIX) and value:
                self.add(value)

    @property
    def active(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        """`text` with every known secret form replaced by MASK."""
        pattern = self._pattern
        if pattern is None or not text or not any(a in text for a in self._anchors):
            return text  # the common case, by substring search (a regex alternation is ~10x slower)
        return pattern.sub(MASK, text)

    def value(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, strings; keys too) with every string passed through `text`."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        return value

    def record(self, record: logging.LogRecord) -> None:
        """Mask a log record's message and traceback in place (its exc_info is dropped only when the
        traceback held a secret: the scrubbed text stays in exc_text)."""
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it itself
            return
        clean = self.text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[0] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            clean = self.text(text)
            if clean != text:
                record.exc_text, record.exc_info = clean, None


SCRUBBER = Scrubber()
_factory_lock = threading.Lock()
_factory_installed = False


def _install_log_factory() -> None:
    """Every log record made in this process from now on is scrubbed (whatever handler writes it)."""
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            SCRUBBER.record(record)
            return record

        logging.setLogRecordFactory(make)
        _factory_installed = True


def scrub(text: str) -> str:
    """`text` without any secret value this process knows."""
    return SCRUBBER.text(text)


def scrub_value(value: Any) -> Any:
    """A JSON-like value without any secret value this process knows."""
    return SCRUBBER.value(value)
