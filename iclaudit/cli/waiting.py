"""Following an audit to its end and reporting it with its exit code: the progress bar or CI log lines,
the result and headline, the JUnit file, the --baseline regression check, and --until-answer's chain of
audits (the service takes the next steps; the CLI follows them)."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from iclaudit.cli.exits import Exit, exit_code, outcome_of
from iclaudit.cli.output import console, err_console
from iclaudit.cli.rendering import (
    eta_text,
    headline_text,
    next_step_lines,
    result_table,
    stage_text,
    warnings_of,
)

if TYPE_CHECKING:
    from iclaudit.client import Audit, IclauditClient


def follow(client: "IclauditClient", audit_id: str, *, live: bool, timeout: float | None) -> "Audit":
    """Wait for the end: a rich progress bar (`live`) or one stderr line per stage (CI logs)."""
    if not live:
        last = [""]

        def note(audit: "Audit") -> None:
            line = f"{audit.state} {stage_text(audit)} {100 * audit.progress.fraction:.0f}%"
            if audit.progress.stage != last[0]:
                err_console.print(line, highlight=False)
                last[0] = audit.progress.stage

        return client.wait(audit_id, timeout=timeout, on_update=note)
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[eta]}"),
    )
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task("queued", total=1.0, eta="ETA –")

        def draw(audit: "Audit") -> None:
            p = audit.progress
            bar.update(task, completed=p.fraction, description=stage_text(audit), eta=eta_text(p.eta_seconds))

        return client.wait(audit_id, timeout=timeout, on_update=draw)


def finish(
    audit: "Audit",
    *,
    as_json: bool,
    junit: bytes | None = None,
    junit_path: Path | None = None,
    allow_inconclusive: bool = False,
    regression: dict[str, Any] | None = None,
) -> Exit:
    """Report a finished audit (table or JSON on stdout, the server's JUnit report to `junit_path`) and
    return its exit code. The last line is the verdict's headline: on stdout after the table, on stderr
    with --json (stdout stays JSON). A `regression` check (--baseline) is said on stderr just before it;
    one that regressed fails the gate (exit 1) whatever the verdict."""
    if junit is not None and junit_path is not None:
        junit_path.write_bytes(junit)
        err_console.print(f"wrote JUnit report {junit_path}", highlight=False)
    succeeded = audit.state == "SUCCEEDED" and audit.result is not None
    if as_json:
        print(audit.model_dump_json(indent=2, exclude_none=False))
    elif succeeded:
        assert audit.result is not None
        console.print(result_table(audit.result, f"{audit.kind} audit {audit.id}", headline=False))
    code = exit_code(audit, allow_inconclusive=allow_inconclusive)
    if regression is not None and regression.get("regressed") is True:
        code = Exit.VIOLATION
    if succeeded:
        assert audit.result is not None
        for note in warnings_of(audit.result):
            err_console.print(f"[yellow]{note}[/]", highlight=False)
        if allow_inconclusive and outcome_of(audit.result) == "inconclusive" and code == Exit.OK:
            err_console.print(
                "[yellow]warning:[/] the audit is inconclusive (it could not have seen a violation); "
                "--allow-inconclusive passes it: exit 0 instead of 4",
                highlight=False,
                soft_wrap=True,
            )
        if regression is not None:
            style = "bold red" if regression.get("regressed") is True else "green"
            err_console.print(Text(str(regression.get("headline")), style=style), soft_wrap=True)
        out = err_console if as_json else console
        out.print(headline_text(audit.result, audit.kind), highlight=False, soft_wrap=True)
        for line in next_step_lines(audit.result):
            out.print(line, highlight=False, soft_wrap=True)
    if code == Exit.AUDIT_FAILED:
        why = f": {audit.error.code}: {audit.error.message}" if audit.error else ""
        err_console.print(f"[red]audit {audit.id} {audit.state}[/]{why}", highlight=False)
    return code


def wait_and_report(
    client: "IclauditClient",
    audit_id: str,
    *,
    live: bool,
    timeout: float | None,
    as_json: bool,
    junit: Path | None,
    allow_inconclusive: bool = False,
    baseline: str | None = None,
) -> Exit:
    from iclaudit.client import WaitTimeout

    try:
        audit = follow(client, audit_id, live=live, timeout=timeout)
    except KeyboardInterrupt:
        err_console.print(
            f"\nStopped watching. Audit {audit_id} keeps running on the server; re-attach with "
            f"`iclaudit watch {audit_id}` or stop it with `iclaudit cancel {audit_id}`.",
            highlight=False,
        )
        return Exit.INTERRUPTED
    except WaitTimeout as exc:
        err_console.print(
            f"[red]error:[/] {exc}; it keeps running (re-attach with `iclaudit watch {audit_id}`)",
            highlight=False,
        )
        return Exit.USAGE
    report = client.junit(audit.id) if junit is not None else None
    regression = None
    if baseline is not None and audit.state == "SUCCEEDED":
        regression = against_baseline(client, audit, baseline)
    return finish(
        audit,
        as_json=as_json,
        junit=report,
        junit_path=junit,
        allow_inconclusive=allow_inconclusive,
        regression=regression,
    )


def against_baseline(client: "IclauditClient", audit: "Audit", ref: str) -> dict[str, Any] | None:
    """The service's regression check of `audit` against the baseline `ref`: an audit id (or its prefix),
    or KEY=VALUE, the newest other SUCCEEDED audit of the same kind with that label. None, with a warning,
    when no audit has the label yet (a first run: the gate then goes by the verdict alone)."""
    key, sep, value = ref.partition("=")
    if not sep:
        return client.regression(audit.id, client.resolve_id(ref))
    for candidate in client.iter_audits(state="SUCCEEDED", kind=audit.kind, labels={key: value}):
        if candidate.id != audit.id:
            return client.regression(audit.id, candidate.id)
    err_console.print(
        f"[yellow]warning:[/] no other SUCCEEDED {audit.kind} audit has the label {ref}: no baseline to "
        "compare with; the gate goes by the verdict alone",
        highlight=False,
        soft_wrap=True,
    )
    return None


def answer_within(
    client: "IclauditClient", body: dict[str, Any], max_seconds: float, *, live: bool, key: str | None
) -> tuple[str, float]:
    """Submit `body` with `until_answer: {max_seconds}` (the service takes each inconclusive audit's next
    step as a new audit: app/jobs/follow_up.py) and follow the chain by `followed_by` to its last audit.
    (the last audit's id, the seconds left to wait for it)."""
    import time

    from iclaudit.client import WaitTimeout

    deadline = time.monotonic() + max_seconds
    chain = {**(body.get("until_answer") or {}), "max_seconds": max_seconds}
    audit = client.submit({**body, "until_answer": chain}, idempotency_key=key)
    err_console.print(f"submitted {audit.kind} audit [bold]{audit.id}[/] ({audit.state})", highlight=False)
    audit_id = audit.id
    while True:
        try:
            done = follow(client, audit_id, live=live, timeout=max(0.0, deadline - time.monotonic()))
        except WaitTimeout:
            return audit_id, 0.0
        if done.state == "SUCCEEDED" and outcome_of(done.result) == "inconclusive":
            err_console.print(done.progress.message, highlight=False, soft_wrap=True)
        if done.followed_by is None:
            return done.id, max(0.0, deadline - time.monotonic())
        audit_id = done.followed_by
