"""The client commands: submit, watch, status, result, list, cancel, plan, resume, datasets, models — all
through iclaudit.client.IclauditClient (one HTTP code path). Both distributions run this code: the light
client's `iclaudit` (iclaudit/cli/__init__.py) and the server's (app/cli), which adds the server commands
and the calculators. Nothing here imports server code: verdicts, headlines and JUnit reports are read from
what the API sends. Exit codes: iclaudit/cli/exits.py.

Imports are lazy (the client and httpx on a command's first call; pydantic when a command makes a model,
which `status` does not; rich's tables and progress bars when drawn), so `iclaudit --help` and `iclaudit
status` start fast (tests/cli/test_cli_start.py).
"""

# No `from __future__ import annotations`: typer reads every command's signature a few times at each start,
# and string annotations would be compiled and evaluated each time (tens of ms of `--help` and `status`).

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from iclaudit.cli.connection import client_error_exit, connected, open_client
from iclaudit.cli.exits import ClientCommand, ClientGroup
from iclaudit.cli.options import (
    DEFAULT_URL,
    AllowInconclusiveOpt,
    BaselineOpt,
    FormatOpt,
    IdArg,
    KeyOpt,
    OutputFormat,
    ResultFormat,
    SetOpt,
    UrlOpt,
)
from iclaudit.cli.output import console, err_console, fail
from iclaudit.cli.rendering import (
    audit_list_table,
    cell_text,
    eta_text,
    flatten,
    headline_text,
    next_step_lines,
    result_table,
)
from iclaudit.cli.request_file import apply_sets, parse_labels, read_request
from iclaudit.cli.waiting import answer_within, wait_and_report


def submit(
    file: Annotated[str, typer.Argument(help="The audit request (a JSON file), or - to read it from stdin.")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the end, then report and exit with the gate's code.")
    ] = False,
    watch_: Annotated[
        bool, typer.Option("--watch", help="Like --wait, with a live progress bar (stage, percent, ETA).")
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", dir_okay=False, help="Write a JUnit XML report here (implies --wait)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the final audit as JSON on stdout (implies --wait).")
    ] = False,
    allow_inconclusive: AllowInconclusiveOpt = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0, help="Give up waiting after this many seconds (exit 3)."),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="KEY=VALUE metadata for the audit (repeatable), e.g. git_sha=…"),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key", help="Re-running with the same key returns the same audit (safe retries)."
        ),
    ] = None,
    set_: SetOpt = None,
    baseline: BaselineOpt = None,
    until_answer: Annotated[
        bool,
        typer.Option(
            "--until-answer",
            help="Ask the service to take each inconclusive audit's first next step that sets request "
            "fields and fits the seconds left, as a new audit (`until_answer`), and follow the chain to its "
            "last audit (needs --max-seconds; implies --wait).",
        ),
    ] = False,
    max_seconds: Annotated[
        float | None,
        typer.Option(
            "--max-seconds", min=1, help="--until-answer: the wall seconds all its audits may take."
        ),
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Start an audit from a request file and print its id; with --wait or --watch, follow it to the end.

    With --until-answer --max-seconds N, the request asks the service for `until_answer: {max_seconds: N}`:
    an inconclusive audit's first next step (its `set` applied: more trials, contexts or budget, …) that
    fits the time left runs as a new audit, and so on; the report is the last audit's.

    Exit codes with --wait or --watch (a CI gate), from the verdict:
    0 = consistent (the audit could have seen a violation and saw none), or a kind without a verdict (iclinf);
    1 = a violation of the claimed ε, or a leak where nothing is claimed (or, with --baseline, a regression);
    2 = the audit failed or was cancelled;
    3 = a usage error, or the service cannot be reached;
    4 = inconclusive (the audit could not have seen a violation; --allow-inconclusive makes it 0).

    The last line is the verdict's headline. Ctrl-C stops watching only: the audit runs on (`iclaudit
    watch ID` re-attaches).
    """
    body = apply_sets(read_request(file), set_)
    if label:
        body["labels"] = {**body.get("labels", {}), **parse_labels(label)}
    if until_answer and max_seconds is None:
        raise fail("--until-answer needs --max-seconds N: the wall seconds its audits may take")
    waiting = wait or watch_ or junit is not None or as_json or baseline is not None or until_answer
    with connected(url, api_key) as client:
        if until_answer:
            assert max_seconds is not None
            audit_id, timeout = answer_within(client, body, max_seconds, live=watch_, key=idempotency_key)
        else:
            audit = client.submit(body, idempotency_key=idempotency_key)
            err_console.print(
                f"submitted {audit.kind} audit [bold]{audit.id}[/] ({audit.state})", highlight=False
            )
            audit_id = audit.id
        if not waiting:
            print(audit_id)
            return
        code = wait_and_report(
            client,
            audit_id,
            live=watch_,
            timeout=timeout,
            as_json=as_json,
            junit=junit,
            allow_inconclusive=allow_inconclusive,
            baseline=baseline,
        )
    raise typer.Exit(code)


def watch(
    audit_id: IdArg,
    junit: Annotated[
        Path | None, typer.Option("--junit", dir_okay=False, help="Write a JUnit XML report here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the final audit as JSON on stdout.")] = False,
    allow_inconclusive: AllowInconclusiveOpt = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0, help="Give up after this many seconds (exit 3).")
    ] = None,
    baseline: BaselineOpt = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Follow a running audit with a live progress bar to its end, then show its result.

    Exit codes, from the verdict:
    0 = consistent (the audit could have seen a violation and saw none), or a kind without a verdict (iclinf);
    1 = a violation of the claimed ε, or a leak where nothing is claimed (or, with --baseline, a regression);
    2 = the audit failed or was cancelled;
    3 = a usage error, or the service cannot be reached;
    4 = inconclusive (the audit could not have seen a violation; --allow-inconclusive makes it 0).

    The last line is the verdict's headline.
    """
    with connected(url, api_key) as client:
        code = wait_and_report(
            client,
            client.resolve_id(audit_id),
            live=True,
            timeout=timeout,
            as_json=as_json,
            junit=junit,
            allow_inconclusive=allow_inconclusive,
            baseline=baseline,
        )
    raise typer.Exit(code)


def status(
    audit_id: IdArg,
    format_: FormatOpt = OutputFormat.table,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Show an audit's state and progress."""
    with connected(url, api_key, typed=False) as client:
        found = client.resolve_id(audit_id)
        if format_ == OutputFormat.json:
            print(client.get(found).model_dump_json(indent=2))
            return
        audit = client.get_json(found)  # one line of text: read as sent, no models to load and make
    p = audit["progress"]
    console.print(
        f"{audit['id']} {audit['kind']} [bold]{audit['state']}[/] attempt {audit.get('attempt', 0)} · "
        f"{p['stage']} {100 * p['fraction']:.0f}% {eta_text(p.get('eta_seconds'))}"
        + (f" {p['message']}" if p.get("message") else ""),
        highlight=False,
    )
    if error := audit.get("error"):
        console.print(f"[red]{error['code']}[/] {error['message']}", highlight=False)
    if audit["state"] == "SUCCEEDED" and audit.get("result") is not None:
        console.print(headline_text(audit["result"], audit["kind"]), highlight=False, soft_wrap=True)
        for line in next_step_lines(audit["result"]):
            console.print(line, highlight=False, soft_wrap=True)


def result(
    audit_id: IdArg,
    format_: Annotated[
        ResultFormat,
        typer.Option(
            "--format",
            help="json (default), csv (field,value rows), table (with what each field means), png "
            "(a plot; needs --output) or html (a self-contained report to share, opens offline).",
        ),
    ] = ResultFormat.json,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", dir_okay=False, help="Write to this file, not stdout.")
    ] = None,
    records: Annotated[
        bool,
        typer.Option("--records", help="The per-record risk table (audits over several canaries) instead."),
    ] = False,
    show_records: Annotated[
        bool,
        typer.Option(
            "--show-records",
            help="The records' text as stored in --records and --format html (default: personal data masked).",
        ),
    ] = False,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Print a finished audit's result, or write it (or its plot) to --output."""
    if format_ == ResultFormat.png and output is None:
        raise fail("--format png needs --output FILE (a PNG is not for the terminal)")
    if records:
        _records(audit_id, format_, output, url, api_key, full=show_records)
        return
    with connected(url, api_key) as client:
        audit_id = client.resolve_id(audit_id)
        if format_ == ResultFormat.png:
            png = client.result_png(audit_id)
        elif format_ == ResultFormat.html:
            report = client.report_html(audit_id, full=show_records)
        elif format_ == ResultFormat.table:
            typed = client.result(audit_id)
        else:
            body = client.result_json(audit_id)
    if format_ == ResultFormat.png:
        assert output is not None
        output.write_bytes(png)
        err_console.print(f"wrote {output} ({len(png):,} bytes)", highlight=False)
        return
    if format_ == ResultFormat.html:
        if output is None:
            sys.stdout.write(report)
        else:
            output.write_text(report, encoding="utf-8")
            err_console.print(
                f"wrote {output} ({len(report):,} characters; open it in a browser)", highlight=False
            )
        return
    if format_ == ResultFormat.table:
        table = result_table(typed, f"{typed.kind} audit {audit_id}", explain=True)
        if output is not None:
            with output.open("w") as fh:
                Console(file=fh, width=160).print(table)
        else:
            console.print(table)
        return
    if format_ == ResultFormat.json:
        text = json.dumps(body, indent=2) + "\n"
    else:
        import csv
        import io

        from iclaudit.csv_cells import safe_cell  # the API's CSV-injection escaping (one function)

        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["field", "value"])
        writer.writerows((safe_cell(k), "" if v is None else safe_cell(v)) for k, v in flatten(body))
        text = out.getvalue()
    if output is not None:
        output.write_text(text)
    else:
        sys.stdout.write(text)


RECORD_COLUMNS = (
    "rank", "record_id", "record_hash", "trials", "gap_mean", "auc", "epsilon_lower", "p_value", "flagged"
)  # fmt: skip


def _records(
    audit_id: str,
    format_: ResultFormat,
    output: Path | None,
    url: str | None,
    api_key: str | None,
    *,
    full: bool = False,
) -> None:
    """`result --records`: GET /v1/audits/{id}/records as JSON, CSV or a table (riskiest first), the records'
    text with personal data masked unless `full`."""
    if format_ in (ResultFormat.png, ResultFormat.html):
        raise fail(
            f"--records has no {format_}; use --format json, csv or table (the html report holds the table)"
        )
    with connected(url, api_key) as client:
        audit_id = client.resolve_id(audit_id)
        text = client.records_csv(audit_id, full=full) if format_ == ResultFormat.csv else None
        rows = client.records(audit_id, full=full) if text is None else []
    if format_ == ResultFormat.table:
        from rich.table import Table

        table = Table(title=f"records of audit {audit_id} ({sum(r['flagged'] for r in rows)} flagged)")
        for column in RECORD_COLUMNS:  # a record's id and hash stay whole (what a reader looks up)
            table.add_column(column, no_wrap=column in ("record_id", "record_hash"))
        for row in rows:
            cells = [row.get(c) for c in RECORD_COLUMNS]
            table.add_row(
                *("" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells)
            )
        if output is not None:
            with output.open("w") as fh:
                Console(file=fh, width=160).print(table)
        else:
            console.print(table)
        return
    if text is None:
        text = json.dumps(rows, indent=2) + "\n"
    if output is not None:
        output.write_text(text)
    else:
        sys.stdout.write(text)


def list_audits(
    state: Annotated[str | None, typer.Option(help="Only audits in this state (e.g. RUNNING).")] = None,
    kind: Annotated[str | None, typer.Option(help="Only audits of this kind.")] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="Only audits with this KEY=VALUE label (repeatable).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Show at most this many.")] = 20,
    format_: FormatOpt = OutputFormat.table,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """List your audits, newest first."""
    with connected(url, api_key, typed=False) as client:
        audits = []
        for audit in client.iter_audits(
            state=state, kind=kind, labels=parse_labels(label), page_size=min(limit, 500)
        ):
            audits.append(audit)
            if len(audits) >= limit:
                break
    if format_ == OutputFormat.json:
        print(json.dumps([a.model_dump(mode="json", exclude_none=True) for a in audits], indent=2))
        return
    console.print(audit_list_table(audits, console.width))


def cancel(
    audit_id: IdArg,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Cancel an audit: a queued one at once, a running one at its next step."""
    with connected(url, api_key, typed=False) as client:
        audit = client.cancel(client.resolve_id(audit_id))
    what = "cancellation requested" if audit.state == "RUNNING" else audit.state
    console.print(f"{audit.id} {what}", highlight=False)


ROW_FORMAT = (
    "one row per line (.jsonl), a CSV with a header, or a JSON list: text and label (classification), "
    "text and summary (generation), or text alone (unlabelled; audits that read no label); "
    "optional split: train or test"
)
PROGRESS_FROM_BYTES = 1 << 20  # a progress bar for files from 1 MiB


def upload(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, readable=True, help="A .jsonl, .csv or .json file of rows."
        ),
    ],
    name: Annotated[str | None, typer.Option("--name", help="Its name (default: the file's).")] = None,
    file_format: Annotated[
        str | None,
        typer.Option("--format", help="jsonl, csv or json (default: the file's extension)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the stored dataset as JSON.")] = False,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Upload a dataset and print its id (use it as `dataset` in a request). Rows: one row per line
    (.jsonl), a CSV with a header, or a JSON list; each {"text", "label"} (classification), {"text",
    "summary"} (generation) or {"text"} alone (unlabelled); an optional "split" of train or test. A bad
    row is refused naming its line, and nothing is stored."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TransferSpeedColumn,
    )

    from iclaudit.client import ApiError, ClientError

    size = file.stat().st_size
    columns = (
        TextColumn("[bold]uploading"),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
    )
    try:
        with (
            open_client(url, api_key) as client,
            Progress(*columns, console=err_console, disable=size < PROGRESS_FROM_BYTES) as bar,
        ):
            task = bar.add_task("upload", total=size)
            stored = client.upload_dataset(
                file,
                name=name,
                fmt=file_format,
                on_progress=lambda sent, total: bar.update(task, completed=sent, total=total),
            )
    except ClientError as exc:
        if isinstance(exc, ApiError) and exc.status == 422:
            err_console.print(f"[dim]rows: {ROW_FORMAT}[/]", highlight=False, soft_wrap=True)
        raise client_error_exit(exc) from None
    if as_json:
        print(json.dumps(stored, indent=2))
        return
    labels = ", ".join(stored.get("labels") or []) or "none"
    err_console.print(
        f"stored {stored['name']!r} v{stored.get('version', 1)}: {stored['task']}, {stored['n_train']} train + "
        f"{stored['n_test']} test rows, labels: {labels}"
        + (
            f"; it replaces {stored['replaces']} as the name's newest version"
            if stored.get("replaces")
            else ""
        ),
        highlight=False,
        soft_wrap=True,
    )
    print(stored["id"])


def datasets(
    ctx: typer.Context,
    format_: FormatOpt = OutputFormat.table,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """List the datasets you can audit with (built-in ones and your uploads); `datasets upload FILE`
    adds one."""
    if ctx.invoked_subcommand is not None:
        return
    list_datasets(format_, url, api_key)


def list_datasets(
    format_: FormatOpt = OutputFormat.table, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None
) -> None:
    """List the datasets you can audit with: built-in ones and your uploads."""
    with connected(url, api_key) as client:
        body = client.datasets()
    if format_ == OutputFormat.json:
        print(json.dumps(body, indent=2))
        return
    from rich.table import Table

    rows = [*body.get("builtins", []), *body.get("datasets", [])]
    table = Table(title=f"{len(rows)} dataset(s): use the name (its newest version) or the id as `dataset`")
    columns = [
        c
        for c in ("name", "version", "task", "available", "n_train", "n_test", "labels", "id")
        if any(c in r for r in rows)
    ]
    for column in columns or ["name"]:  # an id is never cut: it is what a request pins
        table.add_column(column, no_wrap=column == "id", min_width=32 if column == "id" else None)
    for row in rows:
        table.add_row(*(cell_text(row.get(c)) for c in columns or ["name"]))
    console.print(table)


def models(
    format_: FormatOpt = OutputFormat.table, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None
) -> None:
    """List the models audits can use (the default one is marked)."""
    with connected(url, api_key) as client:
        body = client.models()
    if format_ == OutputFormat.json:
        print(json.dumps(body, indent=2))
        return
    from rich.table import Table

    table = Table(title="models")
    for column in ("name", "engine", "type", "context length", "loaded", "available"):
        table.add_column(column)
    for m in body.get("models", []):
        name = m["name"] + (" (default)" if m["name"] == body.get("default_model") else "")
        table.add_row(
            name, m.get("engine"), m.get("type"), cell_text(m.get("context_length")), cell_text(m.get("loaded")),
            cell_text(m.get("available")),
        )  # fmt: skip
    console.print(table)


def plan(
    file: Annotated[str, typer.Argument(help="The audit request (a JSON file), or - to read it from stdin.")],
    set_: SetOpt = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """What an audit would cost and could resolve, without running it (POST /v1/audits/plan): model or
    endpoint calls, tokens, expected seconds, epsilon_detectable at its trials and the trials needed. JSON
    on stdout."""
    body = apply_sets(read_request(file), set_)
    with connected(url, api_key) as client:
        answer = client.request("POST", "/v1/audits/plan", json=body).json()
    print(json.dumps(answer, indent=2))


def resume(
    audit_id: Annotated[
        str, typer.Argument(help="The FAILED or budget-stopped audit (its id, or enough of its start).")
    ],
    no_budget: Annotated[
        bool, typer.Option("--no-budget", help="Resume without the audit's budget.")
    ] = False,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Resume a FAILED or budget-stopped audit (POST /v1/audits/{id}/resume): a new audit with the same
    request and seed that re-issues only the endpoint calls not yet answered. Prints the new audit's id."""
    body = {"budget": None} if no_budget else None
    with connected(url, api_key) as client:
        audit_id = client.resolve_id(audit_id)
        answer = client.request("POST", f"/v1/audits/{audit_id}/resume", json=body).json()
    err_console.print(f"resumed {audit_id} as [bold]{answer['id']}[/] ({answer['state']})", highlight=False)
    print(answer["id"])


def register(app: typer.Typer) -> None:
    """Add the client commands to the iclaudit command."""
    for fn, name in (
        (submit, "submit"),
        (watch, "watch"),
        (status, "status"),
        (result, "result"),
        (list_audits, "list"),
        (cancel, "cancel"),
        (models, "models"),
        (plan, "plan"),
        (resume, "resume"),
    ):
        app.command(name, cls=ClientCommand)(fn)
    group = typer.Typer(cls=ClientGroup, no_args_is_help=False)
    group.callback(invoke_without_command=True)(datasets)
    group.command("list", cls=ClientCommand)(list_datasets)
    group.command("upload", cls=ClientCommand)(upload)
    app.add_typer(group, name="datasets")
