"""The CLI against a real `iclaudit serve` (subprocess, SQLite, inline executor, auth off): submit
--watch shows progress and the result table; status; result as JSON and CSV; keys create/revoke; the CI
gate's exit code per verdict (0 consistent, 1 violation or leak, 4 inconclusive), its headline as the last
line and its JUnit report."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import _register, app
from app.config import get_settings
from testkit.client import long_mia_request
from testkit.served import ICLAUDIT, serve, stop
from testkit.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
# An audit that still runs seconds after it is submitted: 2M oracle trials finished within a second on an
# idle CI machine, before the cancel and Ctrl-C below.
LONG_TRIALS = 16_000_000


@pytest.fixture(scope="module")
def cli() -> CliRunner:
    _register()
    # The commands import the client on their first call (a fast start); loaded here, the in-process
    # timings below measure a command, not that one-time import.
    import iclaudit.client  # noqa: F401

    return CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    state = tmp_path_factory.mktemp("serve")
    # no test here needs SmolLM2 (models are not preloaded)
    proc, url, env = serve(
        state, auth=False, extra_env={"ICLAUDIT_MAX_TRIALS": str(LONG_TRIALS)}, ready_within=60
    )
    yield url, env, state / "serve.log"
    stop(proc)


def test_serve_logs_that_auth_is_off(server) -> None:
    assert "AUTHENTICATION IS OFF" in server[2].read_text()


def test_submit_watch_status_and_result(cli: CliRunner, server) -> None:
    url = server[0]
    out = cli.invoke(app, ["submit", str(ROOT / "examples/bound-counts.json"), "--watch", "--url", url])
    # counts that show leakage, and no claimed ε: a leak (exit 1), named on the last line
    assert out.exit_code == 1, out.output
    assert "submitted bound audit" in out.output and "100%" in out.output
    audit_id = out.output.split("submitted bound audit ")[1].split()[0]
    assert "epsilon" in out.output  # the result table
    headline = out.stdout.strip().splitlines()[-1]
    assert headline.startswith("The system leaks: ε ≥ 0.404 (95 %)") and "nothing is claimed" in headline

    status = cli.invoke(app, ["status", audit_id, "--url", url])
    assert status.exit_code == 0 and "SUCCEEDED" in status.output
    assert status.stdout.strip().splitlines()[-1] == headline  # the verdict in `status` too

    as_json = cli.invoke(app, ["result", audit_id, "--url", url])
    result = json.loads(as_json.stdout)
    as_csv = cli.invoke(app, ["result", audit_id, "--url", url, "--format", "csv"])
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == ["field", "value"] and len(rows) > 2
    first_scalar = next((k, v) for k, v in result.items() if not isinstance(v, dict | list))
    assert [first_scalar[0], str(first_scalar[1])] in rows


def test_submit_of_a_bad_request_exits_non_zero_with_the_reason(
    cli: CliRunner, server, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "bound", "counts": {"tp": 1}}))
    out = cli.invoke(app, ["submit", str(bad), "--url", server[0]])
    assert out.exit_code == 3 and "422" in out.output and "required" in out.output  # a usage error


def test_keys_create_prints_once_and_revoke(cli: CliRunner, server) -> None:
    env = {"ICLAUDIT_STATE_DIR": server[1]["ICLAUDIT_STATE_DIR"]}
    get_settings.cache_clear()  # the commands read Settings from this environment
    created = cli.invoke(app, ["keys", "create", "--tenant", "acme"], env=env)
    assert created.exit_code == 0
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ica_")
    assert cli.invoke(app, ["keys", "revoke", key], env=env).exit_code == 0
    again = cli.invoke(app, ["keys", "revoke", key], env=env)
    assert again.exit_code == 1
    get_settings.cache_clear()
    with sqlite3.connect(Path(env["ICLAUDIT_STATE_DIR"]) / "iclaudit.db") as db:  # the server's database
        assert db.execute(
            "SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = ?", (key.split("_")[1],)
        ).fetchone() == (1,)


# --- the CI gate: exit codes, JUnit, --json, --timeout, Ctrl-C ------------------------------------------


def _example(name: str, **changes: object) -> str:
    return json.dumps({**json.loads((ROOT / "examples" / name).read_text()), **changes})


def _junit(path: Path) -> list:
    from junitparser import JUnitXml

    xml = JUnitXml.fromfile(str(path))
    return [(suite, case) for suite in xml for case in suite]


def test_gate_exit_0_when_consistent_with_the_headline_last_and_its_junit_report(
    cli: CliRunner, server, tmp_path: Path
) -> None:
    """400,000 trials per side against private voting at its claim: the audit could have seen ε ≈ 1.04 and
    saw nothing above 1, so the verdict is consistent — the only outcome that exits 0."""
    report = tmp_path / "report.xml"
    example = str(ROOT / "examples/mia-oracle-eps1.json")
    args = ["submit", example, "--wait", "--junit", str(report), "--url", server[0]]
    out = cli.invoke(app, args, env={"COLUMNS": "160"})
    assert out.exit_code == 0, out.output
    audit_id = out.output.split("submitted mia audit ")[1].split()[0]
    result = json.loads(cli.invoke(app, ["result", audit_id, "--url", server[0]]).stdout)
    assert result["verdict"] == "consistent"
    assert out.stdout.strip().splitlines()[-1] == result["headline"]  # the last line, on a pass too
    assert result["headline"].startswith("Consistent with the claimed ε = 1: measured ε ≥ ")
    assert "details" in out.stdout  # the other ε figures follow the verdict, each with what it is
    assert "the bound the verdict used" in out.stdout and "the most any attack could show" in out.stdout
    cases = _junit(report)
    assert {case.name for _, case in cases} == {"black_box", "white_box", "calibration"}
    suite = cases[0][0]
    props = {p.name: p.value for p in suite.properties()}
    assert props["state"] == "SUCCEEDED" and props["verdict"] == "consistent"
    assert props["headline"] == result["headline"]
    for _, case in cases:
        assert case.is_passed and "verdict = consistent" in case.system_out
    black = next(case for _, case in cases if case.name == "black_box")
    assert f"epsilon_empirical = {result['black_box']['epsilon_lower']:.6g}" in black.system_out
    assert f"epsilon_detectable = {result['epsilon_detectable']:.6g}" in black.system_out


def test_gate_exit_1_on_a_leak_with_the_headline(cli: CliRunner, server, tmp_path: Path) -> None:
    """Plain ICL (mechanism none, nothing claimed) with a likelihood attack: every record leaks (AUC 1)."""
    report = tmp_path / "report.xml"
    example = str(ROOT / "examples/likelihood-oracle-records.json")
    out = cli.invoke(app, ["submit", example, "--wait", "--junit", str(report), "--url", server[0]])
    assert out.exit_code == 1, out.output
    headline = out.stdout.strip().splitlines()[-1]
    assert headline.startswith("Plain ICL leaks: ε ≥ ") and "nothing is claimed" in headline
    ((suite, case),) = _junit(report)
    assert {p.name: p.value for p in suite.properties()}["verdict"] == "leak"
    (failure,) = case.result
    assert failure.type == "PrivacyLeak" and failure.message.startswith(headline)
    assert "verdict = leak" in case.system_out


def test_gate_exit_4_when_inconclusive_and_0_with_allow_inconclusive(
    cli: CliRunner, server, tmp_path: Path
) -> None:
    """25 trials per side cannot resolve a claim of ε = 2: the audit could not have seen a violation."""
    url = server[0]
    body = _example("mia-oracle-eps1.json", trials=25, epsilon=2)
    report = tmp_path / "report.xml"
    out = cli.invoke(app, ["submit", "-", "--wait", "--junit", str(report), "--url", url], input=body)
    assert out.exit_code == 4, out.output
    # the headline, then what would make the audit answer (its computed next step)
    *_, headline, step = out.stdout.strip().splitlines()
    assert headline.startswith("Inconclusive: with 25 trials per side") and "(claimed 2)" in headline
    assert step.startswith("next: set trials = ") and "(now 25)" in step
    assert "warning" not in out.stderr
    cases = {case.name: case for _, case in _junit(report)}
    for name in ("black_box", "white_box"):
        (skipped,) = cases[name].result
        assert type(skipped).__name__ == "Skipped" and skipped.type == "inconclusive"
        assert (
            skipped.message == f"{headline} — {step}" and "verdict = inconclusive" in cases[name].system_out
        )
    assert cases["calibration"].is_passed  # a check in theory: it needs no trials

    allowed = cli.invoke(app, ["submit", "-", "--wait", "--allow-inconclusive", "--url", url], input=body)
    assert allowed.exit_code == 0, allowed.output
    assert "--allow-inconclusive" in allowed.stderr and "instead of 4" in allowed.stderr
    assert allowed.stdout.strip().splitlines()[-2:] == [headline, step]
    as_json = cli.invoke(app, ["submit", "-", "--json", "--url", url], input=body)
    assert as_json.exit_code == 4 and json.loads(as_json.stdout)["result"]["verdict"] == "inconclusive"
    assert as_json.stderr.strip().splitlines()[-2:] == [headline, step]  # stdout stays JSON


def test_until_answer_takes_the_next_step_and_answers(cli: CliRunner, server) -> None:
    """The same inconclusive request with --until-answer: the service takes its next step (more trials) as
    a second audit, which answers `consistent` within the stated seconds; the CLI follows the chain and
    reports the last audit. Without --max-seconds it is a usage error."""
    url = server[0]
    body = _example("mia-oracle-eps1.json", trials=25, epsilon=2)
    args = ["submit", "-", "--until-answer", "--max-seconds", "300", "--url", url]
    out = cli.invoke(app, args, input=body)
    assert out.exit_code == 0, out.output
    assert out.stderr.count("submitted mia audit") == 1
    (taken,) = [line for line in out.stderr.splitlines() if line.startswith("inconclusive; took its next")]
    assert taken.startswith("inconclusive; took its next step as audit ") and ": set trials = " in taken
    assert out.stdout.strip().splitlines()[-1].startswith("Consistent with the claimed ε = 2")
    bare = cli.invoke(app, ["submit", "-", "--until-answer", "--url", url], input=body)
    assert bare.exit_code == 3 and "--max-seconds" in bare.output


def test_gate_exit_1_on_a_violation_from_stdin_with_json_and_junit(
    cli: CliRunner, server, tmp_path: Path
) -> None:
    report = tmp_path / "report.xml"
    body = _example("mia-oracle-bug-noise-divided-by-t.json", trials=20_000, llm_calls=100)
    out = cli.invoke(app, ["submit", "-", "--json", "--junit", str(report), "--url", server[0]], input=body)
    assert out.exit_code == 1, out.output
    final = json.loads(out.stdout)
    assert final["state"] == "SUCCEEDED" and final["result"]["violation"] is True
    cases = {case.name: case for _, case in _junit(report)}
    assert {"black_box", "white_box"} <= set(cases)
    failed = [name for name, case in cases.items() if not case.is_passed]
    assert failed and all(cases[name].result[0].type == "PrivacyViolation" for name in failed)
    headline = final["result"]["headline"]
    assert headline.startswith("Measured ε ≥ ") and headline.endswith("against a claimed 1: violation")
    assert out.stderr.strip().splitlines()[-1] == headline  # with --json the headline goes to stderr
    for name in ("black_box", "white_box"):
        assert f"epsilon_theory = {final['result']['epsilon_theory']:.6g}" in cases[name].system_out
        assert (name in failed) == final["result"][name]["violation"]
        assert "verdict = violation" in cases[name].system_out
    assert all(cases[name].result[0].message.startswith(headline) for name in failed)


def test_gate_exit_2_when_the_audit_fails_or_is_cancelled(cli: CliRunner, server, tmp_path: Path) -> None:
    url = server[0]
    report = tmp_path / "failed.xml"
    body = _example("synthgen-eps1.json", label="no such label", sequences=1, max_new_tokens=1)
    failed = cli.invoke(app, ["submit", "-", "--wait", "--junit", str(report), "--url", url], input=body)
    assert failed.exit_code == 2, failed.output
    assert "FAILED" in failed.output and "no such label" in failed.output
    ((_, case),) = _junit(report)
    assert case.result[0].type == "FAILED"  # a JUnit <error>

    long = json.dumps(long_mia_request(trials=LONG_TRIALS))
    started = cli.invoke(app, ["submit", "-", "--url", url], input=long)
    audit_id = started.stdout.strip()
    assert cli.invoke(app, ["cancel", audit_id, "--url", url]).exit_code == 0
    watched = cli.invoke(app, ["watch", audit_id, "--url", url, "--timeout", "60"])
    assert watched.exit_code == 2 and "CANCELLED" in watched.output


def test_gate_exit_3_on_usage_and_connection_errors(cli: CliRunner, server, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    example = str(ROOT / "examples/bound-counts.json")
    for args in (
        ["submit", example, "--wait", "--url", dead],  # nothing listens there
        ["submit", str(tmp_path / "missing.json"), "--wait", "--url", server[0]],
        ["submit", example, "--wait", "--timeout", "-1", "--url", server[0]],
        ["list", "--format", "xml", "--url", server[0]],
    ):
        out = cli.invoke(app, args)
        assert out.exit_code == 3, (args, out.output)
        assert "Traceback" not in out.output
    proc = subprocess.run(
        [str(ICLAUDIT), "submit", example, "--wait", "--url", dead],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3
    assert proc.stderr.strip().count("\n") == 0 and "cannot reach" in proc.stderr  # one line, no traceback


def test_a_server_that_is_down_is_said_so_within_2_s_with_how_to_start_it(cli: CliRunner) -> None:
    """No --url and no ICLAUDIT_URL: the CLI looks where `PORT=… make serve` listens, gives up on a refused
    connection at once (no retries) and says how to start the service."""
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k not in ("ICLAUDIT_URL", "HOST")} | {"PORT": port}
    for args in (["list"], ["status", "0123abcd"], ["submit", str(ROOT / "examples/bound-counts.json")]):
        started = time.monotonic()
        out = cli.invoke(app, args, env={"ICLAUDIT_URL": None, "HOST": None, "PORT": port})
        elapsed = time.monotonic() - started
        assert out.exit_code == 3, out.output
        assert f"cannot reach http://127.0.0.1:{port}" in out.output and "make serve" in out.output
        assert elapsed < 2.0, (args, elapsed)
    started = time.monotonic()  # the installed command, start-up included (checked before heavy imports)
    proc = subprocess.run([str(ICLAUDIT), "list"], env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 3 and "make serve" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in proc.stderr  # one line
    assert elapsed < 2.0, elapsed
    print(f"iclaudit list with the server down: {elapsed:.2f} s")


def test_wait_timeout_exits_3_and_says_how_to_reattach(cli: CliRunner, server) -> None:
    url = server[0]
    out = cli.invoke(
        app,
        ["submit", "-", "--wait", "--timeout", "1", "--url", url],
        input=json.dumps(long_mia_request(trials=LONG_TRIALS)),
    )
    assert out.exit_code == 3, out.output
    audit_id = out.output.split("submitted mia audit ")[1].split()[0]
    assert f"iclaudit watch {audit_id}" in out.output
    assert cli.invoke(app, ["cancel", audit_id, "--url", url]).exit_code == 0


def test_ctrl_c_during_watch_leaves_the_audit_running_and_says_how_to_reattach(
    server, tmp_path: Path
) -> None:
    url, env, _ = server
    request = tmp_path / "long.json"
    request.write_text(json.dumps(long_mia_request(trials=LONG_TRIALS)))
    # A shell's background job inherits SIGINT ignored, and Python then never installs its Ctrl-C
    # handler: give the CLI the disposition a terminal's foreground process has.
    proc = subprocess.Popen(
        [str(ICLAUDIT), "submit", str(request), "--watch", "--url", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # "submitted mia audit <id> (PENDING)"
    audit_id = line.split("submitted mia audit ")[1].split()[0]
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "keeps running" in err and f"iclaudit watch {audit_id}" in err and "Traceback" not in err
    state = httpx.get(f"{url}/v1/audits/{audit_id}").json()["state"]
    assert state in ("PENDING", "RUNNING", "SUCCEEDED")  # Ctrl-C left it alone (it may already have finished)
    httpx.post(f"{url}/v1/audits/{audit_id}/cancel")


def test_list_datasets_models_status_as_json(cli: CliRunner, server) -> None:
    url = server[0]
    listed = cli.invoke(app, ["list", "--format", "json", "--limit", "2", "--url", url])
    assert listed.exit_code == 0, listed.output
    audits = json.loads(listed.stdout)
    assert 1 <= len(audits) <= 2 and all("id" in a and "state" in a for a in audits)
    status = cli.invoke(app, ["status", audits[0]["id"], "--format", "json", "--url", url])
    assert json.loads(status.stdout)["id"] == audits[0]["id"]
    models = cli.invoke(app, ["models", "--format", "json", "--url", url])
    assert "oracle" in {m["name"] for m in json.loads(models.stdout)["models"]}
    assert cli.invoke(app, ["datasets", "--url", url]).exit_code == 0
    table = cli.invoke(app, ["list", "--url", url])
    assert table.exit_code == 0 and "None" not in table.output


def test_list_shows_each_verdict_and_whole_ids_at_120_columns(cli: CliRunner, server) -> None:
    url = server[0]
    submitted = {}
    for body in (
        _example("bound-counts.json"),  # a leak: nothing claimed
        _example("mia-oracle-eps1.json", trials=25, epsilon=2),  # inconclusive: too few trials
        _example("bound-counts.json", epsilon=1),
    ):
        final = json.loads(cli.invoke(app, ["submit", "-", "--json", "--url", url], input=body).stdout)
        submitted[final["id"]] = final["result"]["verdict"]
    assert {"leak", "inconclusive"} <= set(submitted.values())
    listed = cli.invoke(app, ["list", "--limit", "50", "--url", url], env={"COLUMNS": "120"})
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert max(map(len, lines)) <= 120
    for audit_id, outcome in submitted.items():
        assert len(audit_id) == 32
        (row,) = [line for line in lines if audit_id in line]  # the whole id, on one line
        assert outcome in row


def test_help_documents_the_gate_exit_codes(cli: CliRunner) -> None:
    for command in ("submit", "watch"):
        text = cli.invoke(app, [command, "--help"], env={"COLUMNS": "120"}).output
        for line in (
            "0 = consistent",
            "1 = a violation of the claimed ε, or a leak",
            "2 = the audit failed",
            "3 = a usage",
            "4 = inconclusive",
            "--allow-inconclusive",
        ):
            assert line in text, (command, line)


def _ids_on_screen(output: str, ids: list[str]) -> list[str]:
    """The ids that the `list` output shows whole on one line."""
    return [i for i in ids if any(i in line for line in output.splitlines())]


def test_list_shows_whole_ids_and_commands_take_an_unambiguous_prefix(cli: CliRunner, server) -> None:
    """17 audits: their ids are whole on one line at 80 and 120 columns; `status`, `result` and `cancel`
    take a prefix that names one audit; a prefix two audits share is refused with both listed (by the
    pigeonhole, 17 hex ids share a first digit)."""
    url, env = server[0], server[1]
    body = json.loads((ROOT / "examples/bound-counts.json").read_text())
    ids = [httpx.post(f"{url}/v1/audits", json=body, timeout=30).json()["id"] for _ in range(17)]
    assert all(len(i) == 32 for i in ids)
    for columns in ("80", "120"):
        shown = subprocess.run(
            [str(ICLAUDIT), "list", "--limit", "17", "--url", url],
            env={**env, "COLUMNS": columns},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert _ids_on_screen(shown.stdout, ids) == ids, (columns, shown.stdout)
        assert max(len(line) for line in shown.stdout.splitlines()) <= int(columns)

    def unique_prefix(audit_id: str) -> str:
        """The shortest prefix that names `audit_id` alone among every audit on the server (the module's
        other tests submit audits to it too), as the server resolves it."""

        def matches(prefix: str) -> list[str]:
            page = httpx.get(
                f"{url}/v1/audits", params={"id_prefix": prefix, "page_size": 2}, timeout=30
            ).json()
            return [a["id"] for a in page["audits"]]

        return next(audit_id[:n] for n in range(1, 33) if matches(audit_id[:n]) == [audit_id])

    target = ids[0]
    short = unique_prefix(target)
    status = cli.invoke(app, ["status", short, "--url", url])
    assert status.exit_code == 0 and status.stdout.startswith(target), status.output
    deadline = time.monotonic() + 300  # a result exists once the audit ended (the machine may be busy)
    while httpx.get(f"{url}/v1/audits/{target}", timeout=30).json()["state"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the bound audit did not end in 300 s"
        time.sleep(0.5)
    result = cli.invoke(app, ["result", short.upper(), "--url", url])  # as copied: case does not matter
    assert result.exit_code == 0 and json.loads(result.stdout)["kind"] == "bound"

    shared = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    mine = [i for i in ids if i.startswith(shared)]
    ambiguous = cli.invoke(app, ["status", shared, "--url", url])
    assert ambiguous.exit_code == 3, ambiguous.output
    flat = ambiguous.output.replace("\n", "")
    assert "ambiguous" in flat and all(i in flat for i in mine), ambiguous.output
    absent = next(p * 31 for p in "0f" if not any(i.startswith(p * 31) for i in ids))
    missing = cli.invoke(app, ["cancel", absent, "--url", url])
    assert missing.exit_code == 3 and "no audit of yours" in missing.output.replace("\n", " ")
    bad = httpx.get(f"{url}/v1/audits", params={"id_prefix": "xyz"}, timeout=30)
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["path"] == "query.id_prefix"


def test_datasets_upload_with_a_progress_bar_then_a_bad_row_names_its_line(
    cli: CliRunner, server, tmp_path: Path
) -> None:
    """`iclaudit datasets upload FILE`: a 3 MB JSONL of text-only rows goes up with a progress bar (bytes
    sent) and prints the stored id; `datasets` lists it; a bad row exits 3 naming its line and the row
    format, and nothing is stored."""
    url, env = server[0], server[1]
    big = tmp_path / "notes.jsonl"
    with big.open("w") as fh:
        for i in range(30_000):
            fh.write(
                json.dumps({"text": f"note {i}: patient reports cough since week {i % 52} " + "x" * 40})
                + "\n"
            )
    assert big.stat().st_size > 3_000_000
    shown = subprocess.run(
        [str(ICLAUDIT), "datasets", "upload", str(big), "--name", "notes", "--url", url],
        env={**env, "FORCE_COLOR": "1", "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    dataset_id = shown.stdout.strip()
    assert len(dataset_id) == 32 and "uploading" in shown.stderr and "MB" in shown.stderr
    assert "unlabelled, 24000 train + 6000 test rows" in shown.stderr
    listed = cli.invoke(app, ["datasets", "--format", "json", "--url", url])
    assert listed.exit_code == 0 and dataset_id in listed.stdout

    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nfine,a\nalso fine,b\nmissing its label,\n")
    refused = cli.invoke(app, ["datasets", "upload", str(bad), "--url", url])
    assert refused.exit_code == 3, refused.output
    flat = " ".join(refused.output.split())
    assert "line 4" in flat and "label" in flat and '{"text"} alone (unlabelled)' in flat
    names = [
        d["name"]
        for d in json.loads(cli.invoke(app, ["datasets", "--format", "json", "--url", url]).stdout)[
            "datasets"
        ]
    ]
    assert names == ["notes"]


def test_cosmetics_flags_without_bool_bound_without_reprs_and_422_paths(cli: CliRunner, server) -> None:
    """Help rows of on/off flags show no `<bool>`; `iclaudit bound` prints no Python reprs (a nested
    figure is dotted rows, None a dash); a refused request prints every JSON path, the first included."""
    helped = subprocess.run(
        [str(ICLAUDIT), "submit", "--help"],
        env={**os.environ, "COLUMNS": "140"},
        capture_output=True,
        text=True,
    )
    assert helped.returncode == 0 and "--wait" in helped.stdout and "<bool>" not in helped.stdout
    bound = cli.invoke(app, ["bound", "--tp", "2400", "--fn", "1600", "--fp", "1500", "--tn", "2500"])
    assert bound.exit_code == 0, bound.output
    assert "counts.tp" in bound.stdout and "{'" not in bound.stdout and "None" not in bound.stdout
    assert "False" not in bound.stdout and "True" not in bound.stdout
    body = json.loads((ROOT / "examples/mia-oracle-eps1.json").read_text())
    del body["mechanism"]
    refused = cli.invoke(app, ["submit", "-", "--url", server[0]], input=json.dumps(body))
    assert refused.exit_code == 3 and "at $.mechanism" in refused.output, refused.output
    body["epsilon"], body["mechanism"] = -1, {"name": "private_voting"}
    refused = cli.invoke(app, ["submit", "-", "--url", server[0]], input=json.dumps(body))
    assert refused.exit_code == 3 and "$.epsilon" in refused.output, refused.output


def test_serve_prints_a_banner_for_people_before_the_json_logs(server) -> None:
    """`iclaudit serve` (what `make serve` runs) says where the dashboard is, that auth is off, where
    audits run and on which model, before its first JSON log line."""
    url, _, log = server
    lines = log.read_text().splitlines()
    first_json = next(i for i, line in enumerate(lines) if line.startswith("{"))
    head = "\n".join(lines[:first_json])
    assert f"dashboard  {url}/ui" in head and f"API docs {url}/docs" in head
    assert "auth       OFF" in head and "never expose this server beyond localhost" in head
    assert "worker processes beside the API" in head and "model      smollm2-135m-instruct" in head
