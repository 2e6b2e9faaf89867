"""`--set PATH=VALUE` on a request file (iclaudit/cli/request_file.py): typed by JSON, dotted paths, created
objects, list indices, and one-line usage errors (exit 3) that name the override."""

from __future__ import annotations

import pytest
import typer

from iclaudit.cli.exits import Exit
from iclaudit.cli.request_file import apply_sets
from iclaudit.client import base_url


def test_values_are_typed_as_json_else_text() -> None:
    body = {"kind": "mia", "trials": 400, "mechanism": {"name": "private_voting", "epsilon": 1}}
    out = apply_sets(
        body,
        [
            "trials=2000",
            "mechanism.epsilon=0.5",
            "dataset=support",
            "seed=null",
            "attack.threat_model=black_box",
            'labels={"team": "privacy"}',
            'note="1"',
            "estimator=direct",
            "trials=2500",  # applied in order: the last one wins
        ],
    )
    assert out["trials"] == 2500 and out["mechanism"] == {"name": "private_voting", "epsilon": 0.5}
    assert out["dataset"] == "support" and out["seed"] is None and out["note"] == "1"
    assert out["attack"] == {"threat_model": "black_box"}  # created on the way
    assert out["labels"] == {"team": "privacy"} and out["estimator"] == "direct"


def test_a_number_indexes_a_list() -> None:
    body = {"grid": [{"epsilon": 1}, {"epsilon": 2}]}
    assert apply_sets(body, ["grid.1.epsilon=4"])["grid"] == [{"epsilon": 1}, {"epsilon": 4}]


@pytest.mark.parametrize(
    ("pair", "said"),
    [
        ("trials", "write PATH=VALUE"),
        ("=3", "write PATH=VALUE"),
        ("mechanism..epsilon=1", "write PATH=VALUE"),
        ("trials.count=3", "trials is not an object"),
        ("grid.5=1", "grid.5 is not an index of the list (0 to 1)"),
    ],
)
def test_a_bad_override_is_a_usage_error_naming_it(
    pair: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as raised:
        apply_sets({"trials": 400, "grid": [1, 2]}, [pair])
    assert raised.value.exit_code == Exit.USAGE
    err = capsys.readouterr().err
    assert f"--set {pair!r}" in err and said in err


def test_a_base_url_ending_in_v1_is_the_services_root() -> None:
    assert base_url("http://host:8000/v1") == base_url("http://host:8000/v1/") == "http://host:8000"
    assert base_url("https://audits.example/iclaudit/") == "https://audits.example/iclaudit"
