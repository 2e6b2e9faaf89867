"""Tenants and their API keys: `ica_<id>_<secret>`, stored as scrypt(secret, salt), never the key."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Tenant, utcnow

KEY_PREFIX = "ica"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
# key id → sha256 of a key that passed scrypt in this process: spares the ~50 ms scrypt on every request.
# The row is still read each time, so revocation takes effect at once.
_verified: dict[str, bytes] = {}
_VERIFIED_MAX = 4096


def get_or_create_tenant(session: Session, name: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def _hash_secret(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT)


def create_api_key(session: Session, tenant_name: str) -> tuple[ApiKey, str]:
    """A new key for the tenant (created if new). Returns the row and the full key, which is never stored."""
    tenant = get_or_create_tenant(session, tenant_name)
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    row = ApiKey(id=key_id, tenant_id=tenant.id, salt=salt, secret_hash=_hash_secret(secret, salt))
    session.add(row)
    session.flush()
    return row, f"{KEY_PREFIX}_{key_id}_{secret}"


def revoke_api_key(session: Session, key_id: str) -> bool:
    """Revoke by key id (the part after `ica_`); False if no such live key."""
    result = session.execute(
        update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def parse_api_key(key: str) -> tuple[str, str] | None:
    prefix, _, rest = key.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not key_id or not secret:
        return None
    return key_id, secret


def authenticate(session: Session, key: str) -> Tenant | None:
    """The tenant owning a live key, or None. Constant-time comparison of scrypt(secret, salt) hashes."""
    parsed = parse_api_key(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return None
    digest = hashlib.sha256(key.encode()).digest()
    if not hmac.compare_digest(_verified.get(key_id, b""), digest):
        if not hmac.compare_digest(row.secret_hash, _hash_secret(secret, row.salt)):
            return None
        _verified[key_id] = digest
        while len(_verified) > _VERIFIED_MAX:
            _verified.pop(next(iter(_verified)))
    return session.get(Tenant, row.tenant_id)
