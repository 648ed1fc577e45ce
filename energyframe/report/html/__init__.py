"""``energyframe report``: one self-contained HTML file for a run or a comparison of runs.

The page carries everything inline (plotly.js, the figures' data, the styles): it opens from a
disk, a mail attachment or a CI artifact with no network. Strings from run data are escaped by
Jinja2's autoescaping in the page and by ``figures.text`` in the plots. Every number shown in a
table carries its exact value in ``data-value`` (what tests and scripts read).
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...results.display import cell, derived_columns, plain_number, relative_iqr, si, with_bound
from ...results.meta import RunMeta
from ...results.rundir import SavedRun
from ...results.store import json_safe

#: windows shown in a run's window table (the rest are in windows.csv)
MAX_WINDOW_ROWS = 5000
EXTRA = "report"


class MissingExtraError(UsageError):
    """An optional dependency of a command is not installed."""


def _require():
    try:
        import jinja2
        import plotly
    except ImportError as e:
        raise MissingExtraError(
            f"energyframe report needs plotly and jinja2 ({e.name} is missing): "
            f"pip install 'energyframe[{EXTRA}]'"
        ) from e
    return jinja2, plotly


# -- cells: text for people, the exact value for scripts ----------------------------------------
def number(value: Any) -> str:
    """The exact value of a number as text (``repr`` of a float reads back to the same float)."""
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, int):
        return str(value)
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        return ""
    return repr(as_float) if math.isfinite(as_float) else ""


def _cell(text: str, value: Any = None, field: str = "") -> dict:
    return {"text": text, "value": number(value), "field": field}


def _plain(value: Any) -> str:
    return plain_number(value)


# -- the parts of a run --------------------------------------------------------------------------
def _duration(meta: RunMeta) -> str:
    duration = meta.clock.duration_s if meta.clock is not None else None
    return si(duration, "s") if duration is not None else "-"


def facts(run: SavedRun) -> list[tuple[str, str]]:
    """The run at a glance: status, work, device, sources, when, where, how."""
    meta = run.result.run_meta
    return [
        *_what_ran(run),
        *_device_facts(meta),
        *_when_and_how(meta),
        *_host_facts(meta),
        *_setup_facts(meta),
        *_ending_facts(run),
    ]


def _what_ran(run: SavedRun) -> list[tuple[str, str]]:
    """Where the run is, its status, the workload with its options, the GPU models."""
    from ...compare.comparability import gpu_models

    meta = run.result.run_meta
    workload = meta.workload
    status = run.result.status + (f": {run.result.reason}" if run.result.reason else "")
    name, options = (workload.name, dict(workload.options)) if workload else ("-", {})
    return [
        ("run directory", str(run.path)),
        ("status", status),
        ("workload", f"{name} {json.dumps(options)}"),
        ("GPU", ", ".join(gpu_models(meta)) or "-"),
    ]


def _device_facts(meta: RunMeta) -> list[tuple[str, str]]:
    """The driver versions and power limits the sources report, where they report any."""
    out = []
    drivers = sorted({str(s.info.get("driver_version")) for s in meta.sources} - {"None"})
    if drivers:
        out.append(("driver", ", ".join(drivers)))
    limits = [f"{g['power_limit_w']:g} W" for g in meta.gpus if g.get("power_limit_w") is not None]
    if limits:
        out.append(("power limit", ", ".join(limits)))
    return out


def _when_and_how(meta: RunMeta) -> list[tuple[str, str]]:
    """The sources and primary channels, start, end and duration, the command line."""
    return [
        ("power sources", ", ".join(s.name for s in meta.sources) or "none (timing only)"),
        ("primary channels", ", ".join(meta.primary_channels) or "-"),
        ("started", str(meta.started_at or "-")),
        ("ended", str(meta.ended_at or "-")),
        ("duration", _duration(meta)),
        ("command line", shlex.join(meta.command_line) or "-"),
    ]


def _host_facts(meta: RunMeta) -> list[tuple[str, str]]:
    """The host's name, CPU, logical CPUs and platform, when run.json describes it."""
    host = meta.host
    if not host:
        return []
    described = (
        f"{host.get('hostname', '-')}: {host.get('cpu', '-')}, {host.get('logical_cpus', '-')} logical CPUs, "
        f"{host.get('platform', '-')}"
    )
    return [("host", described)]


def _setup_facts(meta: RunMeta) -> list[tuple[str, str]]:
    """The library versions and the settings the run was given."""
    out = []
    if meta.versions:
        out.append(("versions", ", ".join(f"{k} {v}" for k, v in meta.versions.items() if v)))
    config = [(k, v) for k, v in meta.config.items() if v is not None]
    if config:
        out.append(("config", ", ".join(f"{k}={_plain(v)}" for k, v in config)))
    return out


def _ending_facts(run: SavedRun) -> list[tuple[str, str]]:
    """How the run ended: the measured command's exit code, samples recovered from a journal."""
    out = []
    exit_code = run.result.run_meta.exit_code
    if exit_code is not None:
        out.append(("exit code of the measured command", str(exit_code)))
    origin = run.result.samples_origin
    if origin and origin != "samples.parquet":
        out.append(("samples", f"recovered from {origin} (the run did not finish)"))
    return out


SUMMARY_FIELDS = (
    ("time/iter", "time_per_iter_s", "s"),
    ("energy/iter", "energy_per_iter_j", "J"),
    ("power", "mean_power_w", "W"),
    ("dyn. energy/iter", "dynamic_energy_per_iter_j", "J"),
)


def summary_rows(run: SavedRun) -> list[dict]:
    primary = run.primary_channels
    rows = []
    for s in run.result.summaries:
        cells = [
            _cell(s.phase),
            _cell(s.channel or "(timing only)"),
            _cell(str(s.trials), s.trials, "trials"),
            _cell(str(s.iterations), s.iterations, "iterations"),
        ]
        for _, name, unit in SUMMARY_FIELDS:
            spread = getattr(s, name)
            if spread is None:
                cells += [_cell("-", None, f"{name}.median"), _cell("-", None, f"{name}.iqr")]
                continue
            shown = si(spread.median, unit)
            if name == "energy_per_iter_j":  # with its 95 % bound, as the console shows it
                shown = with_bound(shown, s.energy_bound_pct)
            cells += [
                _cell(shown, spread.median, f"{name}.median"),
                _cell(relative_iqr(spread), spread.iqr, f"{name}.iqr"),
            ]
        cells.append(_cell(", ".join(s.flags)))
        rows.append(
            {
                "phase": s.phase,
                "channel": s.channel,
                "primary": not s.channel or s.channel in primary,
                "cells": cells,
            }
        )
    return rows


#: a one-row table wider than this is shown turned on its side (a row per column): 30 columns
#: of pipeline or per-layer totals side by side do not fit a page
TRANSPOSE_OVER = 6


def derived_tables(run: SavedRun) -> list[dict]:
    """The workload's tables; a single row of many columns is turned into one line per column
    (``transposed``), each cell keeping its field and exact value."""
    out = []
    for table in run.result.derived:
        columns = derived_columns(table)
        rows = [[_cell(cell(c, row.get(c)), row.get(c), c) for c in columns] for row in table.rows]
        out.append(
            {
                "name": table.name,
                "title": table.title,
                "note": table.note,
                "columns": columns,
                "rows": rows,
                "transposed": len(rows) == 1 and len(columns) > TRANSPOSE_OVER,
            }
        )
    return out


def window_rows(run: SavedRun) -> tuple[list[str], list[list[dict]], int]:
    frame = run.result.windows
    if frame.empty:
        return [], [], 0
    columns = list(frame.columns)
    rows = []
    for record in frame.head(MAX_WINDOW_ROWS).to_dict("records"):
        row = []
        for c in columns:
            value = record[c]
            if isinstance(value, str):
                row.append(_cell(value, None, c))
            else:
                row.append(_cell(_plain(value), value, c))
        rows.append(row)
    return columns, rows, len(frame)


def alignment_rows(meta: RunMeta) -> list[tuple[str, str]]:
    out = []
    for channel, entry in meta.alignment.items():
        parts = [f"{k}={_plain(v)}" for k, v in entry.items() if not isinstance(v, (Mapping, list))]
        out.append((str(channel), ", ".join(parts)))
    for channel, shift in meta.time_maps.items():
        out.append((f"{channel} (time map)", ", ".join(f"{k}={_plain(v)}" for k, v in shift.to_json().items())))
    return out


#: the power trace's caption
TRACE_CAPTION = (
    "Power trace: every power channel, windows shaded by phase (drag to zoom, double-click to reset; "
    "secondary channels are in the legend)"
)


def run_figures(run: SavedRun, max_points: int) -> tuple[list[tuple[str, dict]], list[str]]:
    """The run's plots, and notes on the ones that could not be drawn."""
    from ..plots import missing_power
    from . import figures as f

    trace = f.power_trace(run.result, max_points, title=f"{run.label}: power")
    notes: list[str] = []
    if trace is None:
        notes.append(missing_power(run.result) or "no power trace: no channel has samples to draw")
    items: list[tuple[str, dict | None]] = [(TRACE_CAPTION, trace), *_derived_figures(run)]
    workload_items, workload_notes = _workload_figures(run)
    return f.figures_of(items + workload_items), notes + workload_notes


def _derived_figures(run: SavedRun) -> list[tuple[str, dict | None]]:
    """The figures of the workload's derived tables: bars per layer or stage, the per-layer
    closure of a summary that has the whole model's latency."""
    from . import figures as f

    items: list[tuple[str, dict | None]] = []
    for table in run.result.derived:
        if table.name in ("layers", "stages"):
            items.append((table.title, f.layer_bars(table)))
        if table.name == "summary" and table.rows and "whole_latency_s" in table.rows[0]:
            items.append(("Per-layer closure", f.closure(table.rows[0])))
    return items


def _workload_figures(run: SavedRun) -> tuple[list[tuple[str, dict | None]], list[str]]:
    """The figures the run's workload draws itself, and their notes."""
    items: list[tuple[str, dict | None]] = []
    notes: list[str] = []
    for extra in run.workload_figures():
        items.append((extra.title, dict(extra.figure) if extra.figure is not None else None))
        if extra.note:
            notes.append(extra.note)
    return items, notes


def run_context(index: int, run: SavedRun, max_points: int, figure_ids) -> dict:
    figures, notes = run_figures(run, max_points)
    columns, windows, total = window_rows(run)
    meta = run.result.run_meta
    return {
        "anchor": f"run-{index}",
        "index": index,
        "label": run.label,
        "status": run.result.status,
        "reason": run.result.reason,
        "facts": facts(run),
        "sources": [
            {
                "name": s.name,
                "cls": s.class_name or "",
                "version": f"{s.distribution or ''} {s.version or ''}".strip(),
                "options": json.dumps(dict(s.options), default=str),
                "info": json.dumps(json_safe(dict(s.info)), indent=1),
                "channels": [c.to_json() for c in s.channels],
            }
            for s in meta.sources
        ],
        "workload_info": json.dumps(json_safe(dict(meta.workload_info)), indent=1),
        "summary_fields": [label for label, _, _ in SUMMARY_FIELDS],
        "summary": summary_rows(run),
        "derived": derived_tables(run),
        "figures": [(caption, figure_ids(fig)) for caption, fig in figures],
        "figure_notes": notes,
        "alignment": alignment_rows(meta),
        "idle": [
            (str(k), f"{_plain(v.power_w)} W over {_plain(v.duration_s)} s") for k, v in meta.idle_baseline.items()
        ],
        "window_columns": columns,
        "windows": windows,
        "windows_total": total,
        "warnings": run.result.warnings,
        "notes": list(meta.notes),
    }


def comparison_context(runs: Sequence[SavedRun], figures, alpha, min_change_pct, figure_ids) -> dict:
    from ...compare import tables as cr
    from . import figures as f

    comparison = cr.compare_runs(runs, figures=figures, alpha=alpha, min_change_pct=min_change_pct)
    charts = [(f"{fig}: each run", f.compare_bars(comparison, fig)) for fig in figures]
    return {
        "header": cr.header(comparison),
        "columns": cr._columns(comparison),
        "rows": [_comparison_row(row, len(comparison.labels)) for row in comparison.rows],
        "warnings": list(comparison.warnings),
        "only_in": [(where, cr.comparison_names(names)) for where, names in comparison.only_in.items()],
        "figures": [(caption, figure_ids(fig)) for caption, fig in f.figures_of(charts)],
    }


def _comparison_row(row, runs: int) -> dict:
    """One row of the comparison table: its name, then each run's median and, after the
    first run, the change against it and the verdict."""
    from ...compare import tables as cr

    cells = [_cell(cr.row_name(row)), _cell(row.channel or "-"), _cell(cr.figure_label(row))]
    for i in range(runs):
        cells.append(_cell(cr.value_text(row, i), row.values[i], f"run{i}.median"))
        if i:
            cells += _change_cells(row, i)
    significant = any(c is not None and c.significant for c in row.changes)
    return {"cells": cells, "significant": significant, "name": row.name, "figure": row.figure}


def _change_cells(row, i: int) -> list[dict]:
    """Run ``i``'s change against the first run, and the verdict on it."""
    from ...compare import tables as cr

    change = row.changes[i]
    return [
        _cell(cr.change_text(row, i), change.change_pct if change else None, f"run{i}.change_pct"),
        _cell(cr.verdict_text(row, i), None, f"run{i}.verdict"),
    ]


def _script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element (no "</script>", no "<!--")."""
    from plotly.io.json import to_json_plotly

    text = to_json_plotly(data)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def build_report(
    runs: Sequence[SavedRun],
    figures: Sequence[str] = ("time", "energy"),
    alpha: float = 0.05,
    min_change_pct: float = 1.0,
    max_points: int = 20000,
) -> str:
    """The HTML text of the report of ``runs`` (a comparison first when there are several)."""
    jinja2, plotly = _require()
    from markupsafe import Markup
    from plotly.offline import get_plotlyjs

    from ...results.provenance import distribution_version

    specs: list[tuple[str, Markup]] = []

    def figure_id(fig: dict) -> str:
        name = f"figure-{len(specs)}"
        specs.append((name, Markup(_script_json(fig))))
        return name

    comparison = (
        comparison_context(runs, figures, alpha, min_change_pct, figure_id) if len(runs) > 1 else None
    )
    contexts = [run_context(i, run, max_points, figure_id) for i, run in enumerate(runs)]
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("energyframe.report.html", "."),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    workloads = ", ".join(
        dict.fromkeys(r.result.run_meta.workload.name if r.result.run_meta.workload else "?" for r in runs)
    )
    js = get_plotlyjs().replace("</script", "<\\/script")
    return env.get_template("report.html.j2").render(
        title=f"energyframe: {' vs '.join(r.label for r in runs)} ({workloads})",
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        energyframe_version=distribution_version("energyframe") or "unknown",
        plotly_version=plotly.__version__,
        comparison=comparison,
        runs=contexts,
        specs=specs,
        plotly_js=Markup(js),
    )


def write_report(runs: Sequence[SavedRun], path: Path | str, **options: Any) -> Path:
    """Write the report of ``runs`` to ``path`` (atomically); returns the path."""
    from ...results.store import write_bytes

    text = build_report(runs, **options)
    path = Path(path)
    write_bytes(path, text.encode("utf-8"))
    return path
