"""Migrate a database and create API keys in it, as `iclaudit migrate` and `iclaudit keys create` do: the
one set-up of the tests, benchmarks and served apps that need a key (in process, since a CLI start costs
seconds here)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.db import keys
from app.db.engine import make_engine, make_session_factory
from app.db.migrate import upgrade


@contextmanager
def key_maker(url: str, *, migrate: bool = False) -> Iterator[Callable[[str], str]]:
    """`make(tenant)` returns a new API key of `tenant` in the database at `url`, upgraded to the head
    revision first when `migrate`; the engine is disposed on leaving the block."""
    if migrate:
        upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)

    def make(tenant: str) -> str:
        with sessions.begin() as session:
            return keys.create_api_key(session, tenant)[1]

    try:
        yield make
    finally:
        engine.dispose()


def create_key(url: str, tenant: str, *, migrate: bool = False) -> str:
    """One new API key of `tenant` in the database at `url` (upgraded to head first when `migrate`)."""
    with key_maker(url, migrate=migrate) as make:
        return make(tenant)
