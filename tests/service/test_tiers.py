"""The fast tier (testkit/tiers.py): its markers are declared, the fixtures it reads exist, and under it the
servers refuse to start, loudly, before anything runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit import tiers
from testkit.servers import start_postgres, start_redis

ROOT = Path(__file__).resolve().parents[2]


def test_each_fixture_that_marks_a_test_exists_and_its_marker_is_declared(
    request: pytest.FixtureRequest,
) -> None:
    """A renamed fixture would silently stop marking its tests: each name in NEEDS is defined somewhere."""
    declared = {line.split(":")[0] for line in request.config.getini("markers")}
    assert set(tiers.NEEDS.values()) | set(tiers.FAST_LEAVES_OUT) <= declared
    sources = "\n".join(p.read_text() for d in ("tests", "testkit") for p in (ROOT / d).rglob("*.py"))
    for fixture in tiers.NEEDS:
        assert re.search(rf"^def {fixture}\(", sources, re.M), f"no fixture {fixture}"


def test_this_sessions_tests_carry_the_markers_of_their_fixtures(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        for fixture in set(getattr(item, "fixturenames", ())) & set(tiers.NEEDS):
            assert item.get_closest_marker(tiers.NEEDS[fixture]), (item.nodeid, fixture)


@pytest.mark.parametrize(("start", "name"), [(start_postgres, "PostgreSQL"), (start_redis, "Redis")])
def test_under_the_fast_tier_the_servers_refuse_to_start(start, name: str, monkeypatch) -> None:
    monkeypatch.setenv(tiers.TIER_ENV, "fast")
    with pytest.raises(pytest.fail.Exception, match=f"the fast tier .* starts no {name}"):
        start()
