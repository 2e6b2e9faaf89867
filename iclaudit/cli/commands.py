"""The client commands: submit, watch, status, result, list, cancel, plan, resume, datasets, models — all
through iclaudit.client.IclauditClient (one HTTP code path). Both distributions run this code: the light
client's `iclaudit` (iclaudit/cli/__init__.py) and the server's (app/cli), which adds the service commands
and the calculators. Nothing here imports server code: verdicts, headlines and JUnit reports are read from
what the API sends.

Exit codes of `submit --wait` / `--watch` and `watch` (the CI gate), from the result's `verdict`:
  0  the audit SUCCEEDED and its verdict is `consistent`: it could have seen a violation and saw none;
     also a kind that measures no leakage and so has no verdict (iclinf: influence, not ε)
  1  the audit SUCCEEDED and its verdict is `violation` (a measured lower bound exceeds the claimed ε) or
     `leak` (nothing is claimed and the bound exceeds `max_epsilon`); also a mia claim whose noise cannot
     give the claimed ε even in theory (`theory_violation`); also, with `--baseline`, a measured lower
     bound above the baseline audit's upper bound (a regression)
  2  the audit FAILED or was CANCELLED
  3  a usage error (bad option or file, a request the service refused) or the service could not be reached
  4  the audit SUCCEEDED and its verdict is `inconclusive`: it could not have seen a violation (too few
     trials, no signal, an in-sample threshold, …); `--allow-inconclusive` makes it 0, with a warning
  130  interrupted (Ctrl-C): the audit runs on; re-attach with `iclaudit watch ID`
The last line of the report is the verdict's headline (red: violation or leak; yellow: inconclusive;
green: consistent), followed by the result's next steps when it has any (`next: …`, what would make an
inconclusive audit answer). Other client commands exit 0 on success and 3 on a usage or connection error.

Imports are lazy (the client and httpx on a command's first call; pydantic when a command makes a model,
which `status` does not; rich's tables and progress bars when drawn), so `iclaudit --help` and `iclaudit
status` start fast (tests/service/test_cli_start.py).
"""

# No `from __future__ import annotations`: typer reads every command's signature a few times at each start,
# and string annotations would be compiled and evaluated each time (tens of ms of `--help` and `status`).
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
from rich.console import Console
from rich.text import Text

from iclaudit.cli.reach import CONNECT_TIMEOUT_S, PROXY_VARIABLES, START_HINT, default_url

if TYPE_CHECKING:
    from rich.table import Table

    from iclaudit.client import Audit, ClientError, IclauditClient

console = Console()
err_console = Console(stderr=True)
DEFAULT_URL = None  # resolved when a command runs: ICLAUDIT_URL, else default_url()


class Exit(IntEnum):
    """The gate's exit codes (see the module docstring)."""

    OK = 0
    VIOLATION = 1  # a violation or a leak
    AUDIT_FAILED = 2
    USAGE = 3
    INCONCLUSIVE = 4
    INTERRUPTED = 130


# Typer carries its own copy of click: its UsageError is the base of typer.BadParameter.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
assert UsageError.__name__ == "UsageError"


class ClientCommand(typer.core.TyperCommand):
    """Bad options and arguments exit 3 (the gate's usage code), not click's 2."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            exc.exit_code = Exit.USAGE  # type: ignore[attr-defined]
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:  # values converted at call time (choices, ranges)
            exc.exit_code = Exit.USAGE  # type: ignore[attr-defined]
            raise


class ClientGroup(typer.core.TyperGroup):
    """A group of client commands whose bad options exit 3 too."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            exc.exit_code = Exit.USAGE  # type: ignore[attr-defined]
            raise


UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="ICLAUDIT_URL",
        help="Address of the running iclaudit service; default http://${HOST:-127.0.0.1}:${PORT:-8000}, "
        "where `make serve` listens.",
    ),
]
KeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", envvar="ICLAUDIT_API_KEY", help="API key (not needed when auth is off)."),
]


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


class ResultFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    png = "png"
    html = "html"


AllowInconclusiveOpt = Annotated[
    bool,
    typer.Option(
        "--allow-inconclusive",
        help="Exit 0 instead of 4 when the verdict is inconclusive (the audit could not have seen a "
        "violation), with a warning on stderr.",
    ),
]
IdArg = Annotated[
    str,
    typer.Argument(help="The audit's id, or enough of its start to name one audit (see `iclaudit list`)."),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table for people, json for programs.")]


def fail(message: str, code: Exit = Exit.USAGE) -> typer.Exit:
    """Print one line to stderr; the caller raises the returned Exit."""
    err_console.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _client_error(exc: "ClientError") -> typer.Exit:
    from iclaudit.client import ApiError, ServiceUnreachable

    if isinstance(exc, ApiError):
        err_console.print(f"[red]{exc.status}[/] {exc.message}", highlight=False, soft_wrap=True)
        for path, message in exc.details:  # each with its JSON path ($.mechanism.epsilon), the first too
            same = message.rstrip(".") in exc.message
            err_console.print(
                f"  at {path}" if same else f"  {path}: {message}", highlight=False, soft_wrap=True
            )
        return typer.Exit(Exit.USAGE)
    if isinstance(exc, ServiceUnreachable):
        return fail(f"{exc}: {START_HINT}")
    return fail(str(exc))


def _open(url: str | None, api_key: str | None, typed: bool = True) -> "IclauditClient":
    from iclaudit.client import IclauditClient

    url = url or default_url()
    return IclauditClient(
        url,
        api_key,
        connect_timeout=CONNECT_TIMEOUT_S,
        retry_unreachable=False,
        typed=typed,
        verify=_tls(url),
    )


def _tls(url: str) -> Any:
    """httpx's default (certifi's authorities) for a service over TLS or behind a proxy; for plain HTTP with
    no proxy set, where the command speaks no TLS, a context that trusts no authority (it would refuse any
    TLS peer): loading certifi's bundle is tens of ms of a command's start."""
    import os
    import ssl

    if not url.startswith("http://") or any(os.environ.get(name) for name in PROXY_VARIABLES):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


@contextmanager
def connected(url: str | None, api_key: str | None, *, typed: bool = True) -> Iterator["IclauditClient"]:
    """The client for one command; a client error (the service refused, or is not there) becomes one line
    on stderr and exit 3. `typed=False` where the command shows no result table (status, list, cancel):
    no typed result models to import, so it starts as fast in the server's distribution as in the light
    client's."""
    from iclaudit.client import ClientError

    try:
        with _open(url, api_key, typed) as client:
            yield client
    except ClientError as exc:
        raise _client_error(exc) from None


# --- rendering ----------------------------------------------------------------------------------------


def show(value: Any) -> str:
    """A value for a table cell: floats to 6 significant digits, never `None`."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested JSON → (dotted.path, scalar) rows; list items are indexed (`per_position.0`)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return [(prefix, value)]
    rows: list[tuple[str, Any]] = []
    for key, item in items:
        rows.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return rows


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + dot.strip()


def _model_rows(model: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """(field, value, meaning) for every set field of a typed result, nested models expanded; unset and
    null fields are left out, long lists summarised."""
    rows: list[tuple[str, str, str]] = []
    fields = type(model).model_fields
    for name in [*fields, *(model.model_extra or {})]:
        value = getattr(model, name, None)
        if value is None or name == "kind":
            continue
        meaning = _first_sentence(fields[name].description or "") if name in fields else ""
        key = f"{prefix}{name}"
        if hasattr(type(value), "model_fields"):
            rows.extend(_model_rows(value, f"{key}."))
        elif isinstance(value, list) and (
            len(value) > 8 or any(isinstance(v, list | dict) or hasattr(v, "model_fields") for v in value)
        ):
            rows.append((key, f"[{len(value)} values; --format json shows them]", meaning))
        elif isinstance(value, list):
            rows.append((key, ", ".join(show(v) for v in value), meaning))
        elif isinstance(value, dict):
            rows.extend(
                (f"{key}.{k}", show(v), meaning if i == 0 else "") for i, (k, v) in enumerate(flatten(value))
            )
        else:
            rows.append((key, show(value), meaning))
    return rows


EXPLAIN_WIDTH = 110

OUTCOME_STYLE = {
    "violation": "bold red",
    "leak": "bold red",
    "inconclusive": "bold yellow",
    "consistent": "bold green",
}
VERDICT_FIELDS = (
    "verdict",
    "headline",
    "verdict_reason",
    "epsilon_detectable",
    "epsilon_detectable_unbounded",
)

# What each ε figure is, in one short line (the field descriptions, for the API, are longer).
FIGURES = {
    "epsilon_lower": "the bound the verdict used",
    "epsilon_empirical": "lower bound if the noise is Gaussian",
    "epsilon_empirical_assumption_free": "lower bound for any mechanism",
    "epsilon_point": "log(TPR/FPR) at one threshold; not a bound",
    "epsilon_theory": "the claimed ε",
    "epsilon_claimed": "the claimed ε",
    "target_epsilon": "the ε budget asked for",
    "max_epsilon": "leakage allowed without a claim",
    "epsilon_ceiling": "the most any attack could show",
    "epsilon_exact_at_delta": "the same as epsilon_ceiling",
    "epsilon_detectable": "the least ε flagged with P ≥ 0.8",
    "mu_lower": "the lower bound as Gaussian-DP μ",
    "mu_theory": "Gaussian-DP μ of the noise",
}
KIND_FIGURES = {
    ("synthetic_generation", "epsilon_empirical"): "ε these examples spent (exact)",
    ("synthetic_generation", "epsilon_theory"): "the ε budget",
}


def _figure(kind: str, key: str) -> str | None:
    """The short meaning of an ε figure (`black_box.epsilon_point` → its leaf), or None for other fields."""
    leaf = key.rsplit(".", 1)[-1]
    return KIND_FIGURES.get((kind, leaf)) or FIGURES.get(leaf)


def result_table(result: Any, title: str, explain: bool | None = None, *, headline: bool = True) -> "Table":
    """The typed result as field · value · what it means: the verdict first (verdict, headline — unless
    `headline` is False because the caller prints it as its last line —, reason, power), then every other
    field under "details", each ε figure with one short line on what it is. The meanings column shows when
    `explain`, by default when the terminal is at least EXPLAIN_WIDTH wide; narrower, a caption says where
    to find the meanings and an ε figure's short line follows its value. The result is the server's typed
    model (the server's distribution: each field's meaning from its description) or the light client's
    loose one (the same fields; the ε figures' short lines only)."""
    from rich.table import Table

    explain = console.width >= EXPLAIN_WIDTH if explain is None else explain
    table = Table(title=title, show_lines=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")
    if explain:
        table.add_column("what it means", overflow="fold", style="dim")
    else:
        table.caption = (
            "What each field means: `iclaudit result ID --format table` in a wider terminal, or the README."
        )
    rows = _model_rows(result)
    shown = {name for name in VERDICT_FIELDS if headline or name != "headline"}
    if getattr(result, "epsilon_detectable_unbounded", None) is not True:
        shown.discard("epsilon_detectable_unbounded")
    top = {key: (value, meaning) for key, value, meaning in rows if key in VERDICT_FIELDS}
    style = OUTCOME_STYLE.get(outcome_of(result) or "", "")

    def add(key: str, value: str, meaning: str, value_style: str = "") -> None:
        short = _figure(result.kind, key)
        cell = Text(value, style=value_style)
        if short and not explain:
            cell.append(f"  {short}", style="dim")
        table.add_row(key, cell, *([Text(short or meaning)] if explain else []))

    for key in VERDICT_FIELDS:
        if key in top and key in shown:
            add(key, *top[key], value_style=style if key in ("verdict", "headline") else "")
    details = [row for row in rows if row[0] not in VERDICT_FIELDS and not row[0].startswith("evidence.")]
    if top and details:
        table.add_section()
        table.add_row(Text("details", style="bold"), "", *([""] if explain else []))
    for key, value, meaning in details:
        add(key, value, meaning)
    from iclaudit.cli.evidence import evidence_table

    evidence = evidence_table(getattr(result, "evidence", None))
    if evidence is not None:
        table.add_row(
            "evidence", evidence, *([Text("sampled trials: C1 (record in) beside C0")] if explain else [])
        )
    return table


FAILING = frozenset({"violation", "leak"})


def _get(result: Any, name: str) -> Any:
    """A field of a result: a typed or loose model, or the JSON object as the server sent it (`status`)."""
    return result.get(name) if isinstance(result, dict) else getattr(result, name, None)


def outcome_of(result: Any) -> str | None:
    """The outcome the gate acts on, as the server wrote it: the result's `verdict`; for a result stored
    before verdicts existed, `violation` when the result says it is one; None for a kind that measures no
    leakage (iclinf) or no result."""
    if result is None:
        return None
    verdict = _get(result, "verdict")
    if isinstance(verdict, str):
        return verdict
    return "violation" if _get(result, "violation") is True else None


def gate_fails(result: Any) -> bool:
    """What fails the gate (exit 1): a violation, a leak, or (mia) a claim its noise cannot give even in
    theory (the result's `theory_violation`)."""
    return outcome_of(result) in FAILING or _get(result, "theory_violation") is True


def headline_text(result: Any, kind: str) -> Text:
    """The verdict in plain words, coloured by outcome (red: violation or leak; yellow: inconclusive;
    green: consistent); for a kind without a verdict, a dim line saying the gate passes it."""
    outcome = outcome_of(result)
    headline = _get(result, "headline")
    if isinstance(headline, str) and headline:
        return Text(headline, style=OUTCOME_STYLE.get(outcome or "", "bold"))
    if outcome is not None:
        return Text(f"Verdict: {outcome}", style=OUTCOME_STYLE.get(outcome, "bold"))
    what = "influence, not ε against a claim" if kind == "iclinf" else "no leakage against a claim"
    return Text(f"No verdict: a {kind} audit measures {what}; the gate passes it", style="dim")


def next_step_lines(result: Any) -> list[Text]:
    """The result's `next_steps` (what would make the audit answer), one line each, under the headline."""
    lines = []
    for step in _get(result, "next_steps") or []:
        text = step.get("text") if isinstance(step, dict) else getattr(step, "text", None)
        if isinstance(text, str) and text:
            lines.append(Text(f"next: {text}", style="yellow"))
    return lines


def _side(value: Any) -> dict[str, Any] | None:
    """A nested part of a result (a threat model's bound) as a dict, typed model or not."""
    if isinstance(value, dict):
        return value
    return value.model_dump() if hasattr(type(value), "model_fields") else None


def _warnings(result: Any) -> list[str]:
    notes = []
    accuracy, labels = getattr(result, "accuracy", None), getattr(result, "labels", None)
    if result.kind == "iclinf" and isinstance(accuracy, float) and labels and accuracy < 1 / len(labels):
        notes.append(
            f"accuracy {accuracy:.0%} is below chance ({1 / len(labels):.0%} for {len(labels)} labels): the "
            "model ignores the task, so the ICLInf numbers say little about this prompt format"
        )
    for name in ("black_box", "white_box"):  # the threat models whose bound the result marks a violation
        side = _side(getattr(result, name, None))
        if side is not None and side.get("violation") is True:
            measured = side.get("epsilon_lower", side.get("epsilon_empirical"))
            notes.append(
                f"VIOLATION ({name}): measured ε ≥ {show(measured)} exceeds the claimed "
                f"ε = {show(getattr(result, 'epsilon_theory', None))}"
            )
    return notes


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA –"
    return f"ETA {int(seconds) // 60}:{int(seconds) % 60:02d}"


def _stage(audit: "Audit") -> str:
    p = audit.progress
    return p.stage + (f" · {p.message}" if p.message else "")


# --- waiting and the gate -----------------------------------------------------------------------------


def follow(client: "IclauditClient", audit_id: str, *, live: bool, timeout: float | None) -> "Audit":
    """Wait for the end: a rich progress bar (`live`) or one stderr line per stage (CI logs)."""
    if not live:
        last = [""]

        def note(audit: "Audit") -> None:
            line = f"{audit.state} {_stage(audit)} {100 * audit.progress.fraction:.0f}%"
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
            bar.update(task, completed=p.fraction, description=_stage(audit), eta=_eta(p.eta_seconds))

        return client.wait(audit_id, timeout=timeout, on_update=draw)


def gate_code(audit: "Audit", *, allow_inconclusive: bool = False) -> Exit:
    """The gate's exit code (the module docstring's table)."""
    if audit.state != "SUCCEEDED":
        return Exit.AUDIT_FAILED
    if gate_fails(audit.result):
        return Exit.VIOLATION
    if outcome_of(audit.result) == "inconclusive" and not allow_inconclusive:
        return Exit.INCONCLUSIVE
    return Exit.OK


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
    code = gate_code(audit, allow_inconclusive=allow_inconclusive)
    if regression is not None and regression.get("regressed") is True:
        code = Exit.VIOLATION
    if succeeded:
        assert audit.result is not None
        for note in _warnings(audit.result):
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


def _read_request(file: str) -> dict[str, Any]:
    if file == "-":
        text, where = sys.stdin.read(), "standard input"
    else:
        path = Path(file)
        if not path.is_file():
            raise fail(f"{file}: no such file")
        text, where = path.read_text(), file
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{where} is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    if not isinstance(body, dict):
        raise fail(f"{where} must hold one JSON object (an audit request)")
    return body


def _parsed(raw: str) -> Any:
    """A `--set` value: JSON where it parses (2000, 0.5, true, null, "1", [1, 2], {"name": "none"}), else
    the text itself (`dataset=support`)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def apply_sets(body: dict[str, Any], pairs: list[str] | None) -> dict[str, Any]:
    """The request with each `--set PATH=VALUE` applied in order: PATH is dotted (`mechanism.epsilon`;
    a number indexes a list), objects on the way are created, the value is typed by `_parsed`."""
    for pair in pairs or []:
        path, sep, raw = pair.partition("=")
        keys = path.split(".")
        if not sep or not all(keys):
            raise fail(f"--set {pair!r}: write PATH=VALUE, e.g. trials=2000 or mechanism.epsilon=1")
        node: Any = body
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            where = ".".join(keys[: depth + 1])
            if isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise fail(f"--set {pair!r}: {where} is not an index of the list (0 to {len(node) - 1})")
                index: Any = int(key)
            elif isinstance(node, dict):
                index = key
                if not last and node.get(key) is None:
                    node[key] = {}
            else:
                raise fail(f"--set {pair!r}: {'.'.join(keys[:depth])} is not an object")
            if last:
                node[index] = _parsed(raw)
            else:
                node = node[index]
    return body


SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="PATH=VALUE: change the request file's field (dotted: mechanism.epsilon=1; repeatable). The value "
        'is read as JSON (2000, true, null, [1, 2], "1"), else taken as text (dataset=support).',
    ),
]


BaselineOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="ID or KEY=VALUE: also fail (exit 1) when the measured lower bound on ε rose above the baseline "
        "audit's upper confidence bound (an audit id, or the newest other SUCCEEDED audit of the same kind "
        "with that label, e.g. branch=main). Implies --wait.",
    ),
]


def _labels(pairs: list[str] | None) -> dict[str, str]:
    labels = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"--label {pair!r}: write KEY=VALUE")
        labels[key] = value
    return labels


# --- commands -----------------------------------------------------------------------------------------


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
            help="While the audit is inconclusive, submit it again with its first next step that sets "
            "request fields and fits the seconds left (needs --max-seconds; implies --wait).",
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

    With --until-answer --max-seconds N, an inconclusive audit is submitted again with its result's first
    next step taken (its `set` applied: more trials, contexts or budget, …) while one fits the N seconds;
    the report is the last audit's.

    Exit codes with --wait or --watch (a CI gate), from the verdict:
    0 = consistent (the audit could have seen a violation and saw none), or a kind without a verdict (iclinf);
    1 = a violation of the claimed ε, or a leak where nothing is claimed (or, with --baseline, a regression);
    2 = the audit failed or was cancelled;
    3 = a usage error, or the service cannot be reached;
    4 = inconclusive (the audit could not have seen a violation; --allow-inconclusive makes it 0).

    The last line is the verdict's headline. Ctrl-C stops watching only: the audit runs on (`iclaudit
    watch ID` re-attaches).
    """
    body = apply_sets(_read_request(file), set_)
    if label:
        body["labels"] = {**body.get("labels", {}), **_labels(label)}
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


def takeable_step(audit: "Audit", seconds_left: float) -> dict[str, Any] | None:
    """The first next step of an inconclusive SUCCEEDED audit that sets request fields and whose expected
    seconds (when known) fit `seconds_left`; None when there is none."""
    result = audit.result
    if audit.state != "SUCCEEDED" or result is None or outcome_of(result) != "inconclusive":
        return None
    for step in getattr(result, "next_steps", None) or []:
        step = step if isinstance(step, dict) else step.model_dump()
        seconds = step.get("seconds")
        if step.get("set") and (seconds is None or seconds <= seconds_left):
            return step
    return None


def answer_within(
    client: "IclauditClient", body: dict[str, Any], max_seconds: float, *, live: bool, key: str | None
) -> tuple[str, float]:
    """Submit `body`; while its audit ends inconclusive with a `takeable_step`, submit it again with the
    step's `set` applied. (the last audit's id, the seconds left to wait for it)."""
    import time

    from iclaudit.client import WaitTimeout

    deadline = time.monotonic() + max_seconds
    while True:
        audit = client.submit(body, idempotency_key=key)
        key = None  # the first submission's key only: each step is a new request
        err_console.print(
            f"submitted {audit.kind} audit [bold]{audit.id}[/] ({audit.state})", highlight=False
        )
        try:
            done = follow(client, audit.id, live=live, timeout=max(0.0, deadline - time.monotonic()))
        except WaitTimeout:
            return audit.id, 0.0
        step = takeable_step(done, deadline - time.monotonic())
        if step is None:
            return audit.id, max(0.0, deadline - time.monotonic())
        body = apply_sets(body, [f"{path}={json.dumps(value)}" for path, value in step["set"].items()])
        err_console.print(
            f"inconclusive; taking its next step: {step['text']}", highlight=False, soft_wrap=True
        )


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
        f"{p['stage']} {100 * p['fraction']:.0f}% {_eta(p.get('eta_seconds'))}"
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
            state=state, kind=kind, labels=_labels(label), page_size=min(limit, 500)
        ):
            audits.append(audit)
            if len(audits) >= limit:
                break
    if format_ == OutputFormat.json:
        print(json.dumps([a.model_dump(mode="json", exclude_none=True) for a in audits], indent=2))
        return
    console.print(audit_list_table(audits, console.width))


LIST_NARROW = 100  # below this many columns the list drops its rules and shortens progress and dates


def audit_list_table(audits: "list[Audit]", width: int) -> "Table":
    """The list as a table whose ids are always whole on one line (copyable): at 120 columns every column
    fits; narrower than LIST_NARROW, no vertical rules, progress joins the state and dates lose the year."""
    from rich import box
    from rich.table import Table

    from iclaudit.client import TERMINAL_STATES

    narrow = width < LIST_NARROW
    table = Table(title=f"{len(audits)} audit(s)", box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD)
    id_width = max((len(a.id) for a in audits), default=12)
    table.add_column("id", no_wrap=True, min_width=id_width, max_width=id_width)
    table.add_column("verdict", no_wrap=True)
    table.add_column("kind", overflow="fold", no_wrap=not narrow)
    table.add_column("state", overflow="fold")
    if not narrow:
        table.add_column("progress", overflow="fold", ratio=1)
    table.add_column("created", overflow="fold", no_wrap=not narrow)
    for a in audits:
        done = f"{100 * a.progress.fraction:.0f}%"
        if a.created_at is None:
            created = "—"
        else:
            created = a.created_at.strftime("%m-%d %H:%M" if narrow else "%Y-%m-%d %H:%M:%S")
        if narrow:
            state = a.state if a.state in TERMINAL_STATES else f"{a.state} {done}"
            table.add_row(a.id, _list_verdict(a), a.kind, state, created)
        else:
            table.add_row(a.id, _list_verdict(a), a.kind, a.state, f"{a.progress.stage} {done}", created)
    return table


def _list_verdict(audit: "Audit") -> Text:
    """The list's verdict cell: the outcome word, coloured; `—` while running or for a kind without one."""
    verdict = getattr(audit, "verdict", None) or {}
    if not isinstance(verdict, dict):
        verdict = {}
    outcome = verdict.get("outcome") or ("violation" if verdict.get("violation") else None)
    return Text(outcome or "—", style=OUTCOME_STYLE.get(outcome or "", ""))


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
            _open(url, api_key) as client,
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
        raise _client_error(exc) from None
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
        table.add_row(*(_cell(row.get(c)) for c in columns or ["name"]))
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
            name, m.get("engine"), m.get("type"), _cell(m.get("context_length")), _cell(m.get("loaded")),
            _cell(m.get("available")),
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
    body = apply_sets(_read_request(file), set_)
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


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value[:6])) + (" …" if len(value) > 6 else "")
    return show(value)


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


def follow_the_terminal(*consoles: Console) -> None:
    """Rich reads COLUMNS when a console is made (at import); a command run in the same process as an
    earlier one (tests' CliRunner, an embedding program) sees the terminal width it is called with."""
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        for each in (console, err_console, *consoles):
            each.width = int(columns)
