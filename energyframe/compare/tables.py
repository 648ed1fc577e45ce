"""A comparison of saved runs, and its tables: text for the terminal, Markdown for papers and
PRs, CSV and JSON for scripts."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence

import pandas as pd
from rich.table import Table

from ..core.stats import Spread
from ..results.display import cell_text, md_table, md_text, printable, relative_iqr, render, si, with_bound
from ..results.rundir import SavedRun
from ..results.store import json_safe
from . import comparability
from .statistics import (
    DEFAULT_ALPHA,
    DEFAULT_FIGURES,
    DEFAULT_MIN_CHANGE_PCT,
    FIGURES,
    MIN_TRIALS,
    Change,
    Comparison,
    Row,
    compare_trials,
    percent_text,
)

TEST_NAME = "Mann-Whitney U test (two-sided; exact up to 60 trials in all)"
FIGURE_LABELS = {
    "time": "time/iter",
    "energy": "energy/iter",
    "power": "power",
    "dynamic": "dyn. energy/iter",
}
FORMATS = ("text", "md", "csv", "json")


def compare_runs(
    runs: Sequence[SavedRun],
    figures: Sequence[str] = DEFAULT_FIGURES,
    alpha: float = DEFAULT_ALPHA,
    min_change_pct: float = DEFAULT_MIN_CHANGE_PCT,
    all_channels: bool = False,
    derived: bool = True,
) -> Comparison:
    """Every phase (layer, configuration, op) and channel of ``runs`` against the first run,
    with the reasons they may not compare."""
    labels = [r.label for r in runs]
    comparison = compare_trials(
        labels,
        [r.result.windows for r in runs],
        channels=[None if all_channels else r.primary_channels for r in runs],
        kinds=[r.kinds for r in runs],
        figures=figures,
        alpha=alpha,
        min_change_pct=min_change_pct,
        derived=[r.derived_figures() for r in runs] if derived else (),
        same_board=comparability.same_board([r.result.run_meta for r in runs]),
    )
    warnings = comparability.check(labels, [r.result for r in runs])
    return Comparison(
        comparison.labels,
        comparison.rows,
        tuple(warnings),
        comparison.alpha,
        comparison.min_change_pct,
        comparison.only_in,
    )


# -- cells --------------------------------------------------------------------------------------
def value_text(row: Row, i: int) -> str:
    """A run's figure for people: ``20.01 J (IQR 0.0089%, 5)``: median, IQR/median, trials."""
    spread: Spread | None = row.spreads[i]
    value = row.values[i]
    if spread is None:
        if not math.isfinite(value):
            return "-"
        if row.unit in ("s", "J", "W"):
            return si(value, row.unit)
        return f"{value:.4g}{' ' + row.unit if row.unit else ''}"
    return f"{with_bound(si(spread.median, row.unit), row.bound_pct(i))} (IQR {relative_iqr(spread)}, {spread.n})"


def change_text(row: Row, i: int) -> str:
    change = row.changes[i]
    if change is None or not math.isfinite(change.change_pct):
        return "-"
    return percent_text(change.change_pct)


def verdict_text(row: Row, i: int) -> str:
    change = row.changes[i]
    return change.verdict if change is not None else ("-" if i else "reference")


def row_name(row: Row) -> str:
    return row.name if row.kind == "phase" else f"{row.kind} {row.name}"


def figure_label(row: Row) -> str:
    return FIGURE_LABELS.get(row.figure, row.figure)


def header(comparison: Comparison) -> str:
    return (
        f"Against {comparison.reference}. Each run: median (IQR/median, trials). Verdicts: "
        f"{TEST_NAME} over the trials, alpha {comparison.alpha:g}; at least {MIN_TRIALS} trials per "
        f"run; changes under {comparison.min_change_pct:g} % are not significant."
    )


def notes(comparison: Comparison) -> list[str]:
    out = (
        []
        if comparison.rows
        else [f"nothing to compare: no phase of {comparison.reference} is in another run"]
    )
    out += [f"warning: {w}" for w in comparison.warnings]
    for where, names in comparison.only_in.items():
        out.append(f"only in {where or 'none'}: {comparison_names(names)}")
    return out


def comparison_names(names: Sequence[str]) -> str:
    return comparability._names(names)


def _columns(comparison: Comparison) -> list[str]:
    columns = ["what", "channel", "figure", comparison.labels[0]]
    for label in comparison.labels[1:]:
        columns += [label, f"change ({label})", f"verdict ({label})"]
    return columns


def _cells(comparison: Comparison, row: Row) -> list[str]:
    cells = [row_name(row), row.channel or "-", figure_label(row), value_text(row, 0)]
    for i in range(1, len(comparison.labels)):
        cells += [value_text(row, i), change_text(row, i), verdict_text(row, i)]
    return cells


# -- tables ---------------------------------------------------------------------------------------
def text_table(comparison: Comparison, width: int = 1000) -> str:
    """The rich table as text, at most ``width`` columns (wider than the table: no wrapping)."""
    extra = notes(comparison)
    lines = ""
    if comparison.rows:  # with nothing in common, the notes say so: no empty table first
        table = Table(title=cell_text(header(comparison)), title_justify="left", header_style="bold")
        for column in _columns(comparison):
            table.add_column(cell_text(column), overflow="fold")
        for row in comparison.rows:
            table.add_row(*map(cell_text, _cells(comparison, row)))
        lines = render(table, width=width)
    return lines + ("\n".join(map(printable, extra)) + "\n" if extra else "")


def markdown_table(comparison: Comparison) -> str:

    n = len(comparison.labels)
    right = [False] * 3 + [True] + [True, True, False] * (n - 1)
    lines: list[str] = []
    if comparison.rows:  # with nothing in common, the notes say so: no empty table first
        lines = [md_text(header(comparison)), ""]
        lines += md_table(_columns(comparison), [_cells(comparison, row) for row in comparison.rows], right)
        lines.append("")
    lines += [f"- {md_text(note)}" for note in notes(comparison)]
    return "\n".join(lines).strip("\n") + "\n"


SPREAD_FIELDS = ("n", "median", "q1", "q3", "iqr", "cv")


def long_rows(comparison: Comparison) -> list[dict]:
    """One record per row and run: the numbers behind every cell, unformatted."""
    out = []
    for row in comparison.rows:
        for i, label in enumerate(comparison.labels):
            spread = row.spreads[i]
            if spread is None and not math.isfinite(row.values[i]):
                continue
            record = {
                "kind": row.kind,
                "name": row.name,
                "channel": row.channel,
                "figure": row.figure,
                "unit": row.unit,
                "run": label,
                "reference": i == 0,
            }
            record.update(_spread_fields(spread, row.values[i]))
            record.update(_change_fields(row.changes[i]))
            record.update(verdict=verdict_text(row, i))
            out.append(record)
    return out


def _spread_fields(spread: Spread | None, value: float) -> dict:
    """A cell's spread over trials; a value without one (a derived figure) is its median."""
    if spread is None:
        return {f: (value if f == "median" else None) for f in SPREAD_FIELDS}
    return {f: getattr(spread, f) for f in SPREAD_FIELDS}


def _change_fields(change: Change | None) -> dict:
    """A cell's change against the reference and its test (all None for the reference)."""
    test = change.test if change is not None else None
    return {
        "ratio": change.ratio if change is not None else None,
        "change_pct": change.change_pct if change is not None else None,
        "p_value": test.p_value if test is not None else None,
        "u": test.u if test is not None else None,
        "test": test.method if test is not None else None,
        "significant": change.significant if change is not None else None,
    }


def csv_table(comparison: Comparison) -> str:
    buffer = io.StringIO()
    pd.DataFrame(long_rows(comparison)).to_csv(buffer, index=False)
    return buffer.getvalue()


def json_document(comparison: Comparison, runs: Sequence[SavedRun] = ()) -> dict:
    return json_safe(
        {
            "reference": comparison.reference,
            "runs": [{"label": r.label, "path": str(r.path)} for r in runs]
            or [{"label": label} for label in comparison.labels],
            "test": TEST_NAME,
            "alpha": comparison.alpha,
            "min_change_pct": comparison.min_change_pct,
            "min_trials": MIN_TRIALS,
            "figures": {k: {"column": v[0], "unit": v[1]} for k, v in FIGURES.items()},
            "warnings": list(comparison.warnings),
            "only_in": {k: list(v) for k, v in comparison.only_in.items()},
            "rows": long_rows(comparison),
        }
    )


def json_table(comparison: Comparison, runs: Sequence[SavedRun] = ()) -> str:
    return json.dumps(json_document(comparison, runs), indent=2, allow_nan=False) + "\n"
