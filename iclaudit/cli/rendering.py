"""How the client commands draw what the API sends: the result table (verdict first, each ε figure with
what it is), the coloured headline and next steps, warnings, progress text, the list of audits. Rich's
tables are imported when one is drawn, not at start-up."""

from typing import TYPE_CHECKING, Any

from rich.text import Text

from iclaudit.cli.exits import field_of, outcome_of
from iclaudit.cli.output import console

if TYPE_CHECKING:
    from rich.table import Table

    from iclaudit.client import Audit


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


def headline_text(result: Any, kind: str) -> Text:
    """The verdict in plain words, coloured by outcome (red: violation or leak; yellow: inconclusive;
    green: consistent); for a kind without a verdict, a dim line saying the gate passes it."""
    outcome = outcome_of(result)
    headline = field_of(result, "headline")
    if isinstance(headline, str) and headline:
        return Text(headline, style=OUTCOME_STYLE.get(outcome or "", "bold"))
    if outcome is not None:
        return Text(f"Verdict: {outcome}", style=OUTCOME_STYLE.get(outcome, "bold"))
    what = "influence, not ε against a claim" if kind == "iclinf" else "no leakage against a claim"
    return Text(f"No verdict: a {kind} audit measures {what}; the gate passes it", style="dim")


def next_step_lines(result: Any) -> list[Text]:
    """The result's `next_steps` (what would make the audit answer), one line each, under the headline."""
    lines = []
    for step in field_of(result, "next_steps") or []:
        text = step.get("text") if isinstance(step, dict) else getattr(step, "text", None)
        if isinstance(text, str) and text:
            lines.append(Text(f"next: {text}", style="yellow"))
    return lines


def _side(value: Any) -> dict[str, Any] | None:
    """A nested part of a result (a threat model's bound) as a dict, typed model or not."""
    if isinstance(value, dict):
        return value
    return value.model_dump() if hasattr(type(value), "model_fields") else None


def warnings_of(result: Any) -> list[str]:
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


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA –"
    return f"ETA {int(seconds) // 60}:{int(seconds) % 60:02d}"


def stage_text(audit: "Audit") -> str:
    p = audit.progress
    return p.stage + (f" · {p.message}" if p.message else "")


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


def cell_text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value[:6])) + (" …" if len(value) > 6 else "")
    return show(value)
