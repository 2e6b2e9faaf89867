"""The fast tier (testkit/tiers.py): its markers are declared, the fixtures it reads exist, and under it the
servers refuse to start, loudly, before anything runs."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

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


def test_the_fast_tier_leaves_out_what_was_measured_slow_and_keeps_the_unmeasured(
    request: pytest.FixtureRequest,
) -> None:
    items = [
        i for i in request.session.items if not any(i.get_closest_marker(m) for m in tiers.FAST_LEAVES_OUT)
    ]
    assert len(items) >= 2
    slow, fast = items[0].nodeid, items[1].nodeid
    left: list[pytest.Item] = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: left.extend(items)))
    kept = list(items)
    tiers.select_fast(config, kept, {slow: tiers.FAST_SECONDS, fast: tiers.FAST_SECONDS / 2})
    assert [i.nodeid for i in left] == [slow]
    assert kept == items[1:]  # the measured-fast test and every unmeasured one stay


def test_store_durations_sums_a_tests_phases_and_keeps_the_tests_that_did_not_run(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    path.write_text('{"tests/a.py::old": 3.0, "tests/a.py::t": 9.0}')
    recorder = tiers.DurationRecorder(path)
    for phase, seconds in (("setup", 0.25), ("call", 0.5), ("teardown", 0.125)):
        recorder.pytest_runtest_logreport(
            pytest.TestReport("tests/a.py::t", ("a", 1, "t"), {}, "passed", None, phase, duration=seconds)
        )
    worker = SimpleNamespace(config=SimpleNamespace(workerinput={}))
    recorder.pytest_sessionfinish(worker)
    assert tiers.read_durations(path)["tests/a.py::t"] == 9.0  # a worker writes nothing
    controller = SimpleNamespace(config=SimpleNamespace())
    recorder.pytest_sessionfinish(controller)
    assert tiers.read_durations(path) == {"tests/a.py::old": 3.0, "tests/a.py::t": 0.875}
