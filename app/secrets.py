"""Target credentials by reference (issue 22 §4): a request names a secret, the server holds its value.

`"headers": {"Authorization": {"secret": "TARGET_KEY"}}` is stored as that reference. The value is looked
up only when the audit calls its target, first in the tenant's secrets file
(`ICLAUDIT_SECRETS_DIR/<tenant name>.json`, a JSON object of name → value), then in the server's environment
under a fixed prefix (`ICLAUDIT_SECRET_TARGET_KEY`), so a tenant can read no other variable. An
environment secret is the operator's and every tenant may send it, but only to the URLs that
ICLAUDIT_ENDPOINT_ALLOWLIST lets audits call; a per-tenant secret goes in the tenant's file. Values are
never stored, returned or logged: errors name the secret, never its value.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

ENV_PREFIX = "ICLAUDIT_SECRET_"
NAME_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
_TENANT_FILE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")
# Header names whose literal value is a credential: those go by reference (a 422 at submit otherwise).
CREDENTIAL_HEADER = re.compile(r"auth|token|secret|passw|api[-_]?key|cookie|session", re.IGNORECASE)


class MissingSecret(LookupError):
    """The named secret is not set for this tenant; the message names it, never a value."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"secret {name!r} is not set on this server ({ENV_PREFIX}{name}, or {name} in the tenant's "
            "secrets file under ICLAUDIT_SECRETS_DIR)"
        )
        self.name = name


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


def resolver(
    *,
    tenant: str | Callable[[], str | None] | None,
    secrets_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Callable[[str], str]:
    """name → value for one tenant (its name, or a function giving it when a file is read): the tenant's
    file, then `ICLAUDIT_SECRET_<name>`; MissingSecret."""
    env = os.environ if environ is None else environ

    def resolve(name: str) -> str:
        if not re.match(NAME_PATTERN, name):
            raise MissingSecret(name)
        value = None
        if secrets_dir is not None:
            value = _tenant_file(secrets_dir, tenant() if callable(tenant) else tenant).get(name)
        if value is None:
            value = env.get(ENV_PREFIX + name)
        if value is None:
            raise MissingSecret(name)
        return value

    return resolve


def credential_header(name: str) -> bool:
    """A header whose literal value would be a credential (Authorization, X-Api-Key, Cookie, …)."""
    return bool(CREDENTIAL_HEADER.search(name))
