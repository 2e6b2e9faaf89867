"""The runner's claim (a conditional UPDATE), attempt-guarded writes, the sweep query, and key hashing."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from app.db import audits, keys, scoping
from app.db.engine import make_engine, make_session_factory
from app.db.models import ApiKey, Audit, AuditState, utcnow


def _setup(url: str):
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions.begin() as s:
        tenant = keys.get_or_create_tenant(s, "t")
        audit = audits.add_audit(s, tenant_id=tenant.id, kind="bound", request={"kind": "bound"})
    return engine, sessions, tenant.id, audit.id


def test_claim_is_exclusive_until_the_heartbeat_goes_stale(database_url: str) -> None:
    engine, sessions, _, audit_id = _setup(database_url)
    fresh = utcnow() - timedelta(seconds=60)
    with sessions.begin() as s:
        assert audits.claim_audit(s, audit_id=audit_id, stale_before=fresh) == 1
    with sessions.begin() as s:  # a live attempt holds it
        assert audits.claim_audit(s, audit_id=audit_id, stale_before=fresh) is None
    with sessions.begin() as s:  # its worker died: the heartbeat is older than the cutoff
        s.execute(update(Audit).values(heartbeat_at=utcnow() - timedelta(hours=1)))
    with sessions.begin() as s:
        assert audits.claim_audit(s, audit_id=audit_id, stale_before=fresh) == 2
    with sessions.begin() as s:  # the dead attempt can no longer write
        assert not audits.finish_audit(s, audit_id=audit_id, attempt=1, state=AuditState.SUCCEEDED, result={})
        assert not audits.record_progress(
            s, audit_id=audit_id, attempt=1, stage="x", fraction=0.5, eta_seconds=None, message=""
        )
        assert audits.finish_audit(
            s, audit_id=audit_id, attempt=2, state=AuditState.SUCCEEDED, result={"a": 1}
        )
    with sessions.begin() as s:  # finished audits are never claimed again
        assert audits.claim_audit(s, audit_id=audit_id, stale_before=utcnow()) is None
        assert s.get(Audit, audit_id).result == {"a": 1}
    engine.dispose()


def test_sweep_picks_only_audits_whose_message_is_lost(database_url: str) -> None:
    engine, sessions, tenant_id, never_sent = _setup(database_url)
    cutoff = utcnow() - timedelta(seconds=30)

    def lost(s) -> set[str]:
        return set(audits.cancel_stale_and_list_lost(s, stale_before=cutoff, queue_epoch="e1"))

    with sessions.begin() as s:
        running, waiting, old_queue, _just_submitted = (
            audits.add_audit(s, tenant_id=tenant_id, kind="bound", request={}).id for _ in range(4)
        )
        # never sent for an hour (the broker was down at submit); `_just_submitted` is still being sent
        s.execute(
            update(Audit).where(Audit.id == never_sent).values(created_at=utcnow() - timedelta(hours=1))
        )
        audits.mark_enqueued(s, [running, waiting], queue_epoch="e1", sent_at=utcnow())
        audits.mark_enqueued(
            s, [old_queue], queue_epoch="e0", sent_at=utcnow()
        )  # a broker since restarted empty
        audits.claim_audit(s, audit_id=running, stale_before=cutoff)
    with sessions.begin() as s:  # `waiting` is in the live queue however long it waits: never duplicated
        assert lost(s) == {never_sent, old_queue}
        s.execute(
            update(Audit).where(Audit.id == running).values(heartbeat_at=utcnow() - timedelta(minutes=5))
        )
    with sessions.begin() as s:  # its worker died: sent once more ...
        assert lost(s) == {never_sent, old_queue, running}
        audits.mark_enqueued(s, [running], queue_epoch="e1", sent_at=utcnow())
    with sessions.begin() as s:  # ... and not again while that attempt stays dead
        assert lost(s) == {never_sent, old_queue}
    engine.dispose()


def test_keys_store_only_a_salted_hash(database_url: str) -> None:
    engine, sessions, _, _ = _setup(database_url)
    with sessions.begin() as s:
        _, key = keys.create_api_key(s, "t")
        _, key2 = keys.create_api_key(s, "t")
    key_id, secret = keys.parse_api_key(key)
    with sessions.begin() as s:
        stored = s.scalar(select(ApiKey).where(ApiKey.id == key_id))
        assert secret.encode() not in stored.secret_hash and len(stored.salt) == 16
        assert keys.authenticate(s, key).name == "t"
        assert keys.authenticate(s, key2).name == "t"
        assert keys.authenticate(s, f"ica_{key_id}_wrong") is None
    engine.dispose()


def test_page_tokens_round_trip() -> None:
    now = utcnow()
    assert scoping.decode_page_token(scoping.encode_page_token(now, "abc")) == (now, "abc")
