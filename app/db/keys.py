"""Tenants and their API keys: `ica_<id>_<secret>`, stored as scrypt(secret, salt), never the key."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Tenant, utcnow

KEY_PREFIX = "ica"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
VERIFIED_TTL_SECONDS = 5.0
"""How long a verified key is trusted without reading its row: a key revoked in this process stops at
once; one revoked elsewhere (the CLI, another API process) within this many seconds."""
_VERIFIED_MAX = 4096
# sha256 of a full key that passed scrypt here → (key id, tenant id, monotonic time verified): a hit costs
# neither the ~50 ms scrypt nor a read, so a poll authenticates without the database. Bounded (LRU) and
# short-lived; a wrong secret never hits (its digest differs), so failed-auth throttling is unchanged.
_verified: OrderedDict[bytes, tuple[str, str, float]] = OrderedDict()
_verified_lock = threading.Lock()


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
    forget_key(key_id)
    result = session.execute(
        update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def forget_key(key_id: str) -> None:
    """Drop this process's verified entries for a key id (it is being revoked)."""
    with _verified_lock:
        for digest in [d for d, (kid, _, _) in _verified.items() if kid == key_id]:
            del _verified[digest]


def parse_api_key(key: str) -> tuple[str, str] | None:
    prefix, _, rest = key.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not key_id or not secret:
        return None
    return key_id, secret


def remembered_tenant_id(key: str) -> str | None:
    """The tenant id of a key verified here in the last VERIFIED_TTL_SECONDS (no database), else None."""
    found = remembered(key)
    return None if found is None else found[0]


def remembered(key: str) -> tuple[str, float] | None:
    """(tenant id, seconds since its row was last read) of a key verified here in the last
    VERIFIED_TTL_SECONDS, else None. A caller may re-read the row before the TTL runs out
    (`authenticated_tenant_id(session, key, max_age=0)`), which renews the entry."""
    digest = hashlib.sha256(key.encode()).digest()
    with _verified_lock:
        hit = _verified.get(digest)
        if hit is None or (age := time.monotonic() - hit[2]) >= VERIFIED_TTL_SECONDS:
            return None
        _verified.move_to_end(digest)
        return hit[1], age


_decoy: tuple[bytes, bytes] | None = None


def _decoy_hash() -> tuple[bytes, bytes]:
    """(salt, hash) of a random secret no key has: what an unknown or revoked key id is compared against,
    so that it costs the same scrypt as a known one (no timing oracle on key ids)."""
    global _decoy
    if _decoy is None:
        salt = secrets.token_bytes(16)
        _decoy = (salt, _hash_secret(secrets.token_urlsafe(32), salt))
    return _decoy


def authenticated_tenant_id(
    session: Session, key: str, *, max_age: float = VERIFIED_TTL_SECONDS
) -> str | None:
    """The id of the tenant owning a live key, or None. A key verified here in the last `max_age` seconds
    (VERIFIED_TTL_SECONDS; 0 for a re-check that must see a revocation made elsewhere) answers from
    memory; after that its row is read again (revoked → None), and scrypt(secret, salt) is compared (in
    constant time) only for a key not verified before. The cost does not depend on whether the key id
    exists: an unknown or revoked id is compared against a decoy hash with the same scrypt, and the
    answer is decided after it (one path, no early return)."""
    parsed = parse_api_key(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    digest = hashlib.sha256(key.encode()).digest()
    now = time.monotonic()
    with _verified_lock:
        hit = _verified.get(digest)
        if hit is not None:
            _verified.move_to_end(digest)
    if hit is not None and now - hit[2] < min(max_age, VERIFIED_TTL_SECONDS):
        return hit[1]
    row = session.get(ApiKey, key_id)
    live = row is not None and row.revoked_at is None
    if hit is None:  # never verified here: scrypt, against the row's hash or the decoy's
        salt, expected = (row.salt, row.secret_hash) if live and row is not None else _decoy_hash()
        matched = hmac.compare_digest(expected, _hash_secret(secret, salt))
    else:  # this exact key passed scrypt here before: only its row's state can have changed
        matched = True
    if not (live and matched) or row is None:
        with _verified_lock:
            _verified.pop(digest, None)
        return None
    with _verified_lock:
        _verified[digest] = (key_id, row.tenant_id, now)
        _verified.move_to_end(digest)
        while len(_verified) > _VERIFIED_MAX:
            _verified.popitem(last=False)
    return row.tenant_id


def authenticate(session: Session, key: str) -> Tenant | None:
    """The tenant owning a live key, or None (`authenticated_tenant_id`, then the tenant's row)."""
    tenant_id = authenticated_tenant_id(session, key)
    return None if tenant_id is None else session.get(Tenant, tenant_id)
