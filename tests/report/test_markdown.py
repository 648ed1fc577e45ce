"""The ``markdown`` reporter: report.md in the run directory, or stdout when the run is not saved."""

import re

import numpy as np
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.reporters.markdown import MarkdownReporter
from energyframe.results import store
from energyframe.results.display import si
from energyframe.results.result import RunResult
from tests.fakes import ListWorkload, SignalSource, busy_phase

HOSTILE = "a|b <img src=x> *c*"
CONFIG = ef.RunSettings(trials=3, min_window_s=0.05, warmup_s=0.0)


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row (a ``\\|`` is text, not a column break)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_report_md_in_the_run_directory(tmp_path):
    out = tmp_path / "run"
    # a stage of one phase gives the phase its name
    pipe = ef.Pipeline(
        "two", [(HOSTILE, ListWorkload([busy_phase("x", 0.001)])), ("add", ListWorkload([busy_phase()]))]
    )
    ef.run(pipe, power=[SignalSource(name="gpu")], reporters=["markdown"], out=out, settings=CONFIG)
    text = (out / "report.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "# two: complete"
    assert f"- **run directory**: `{out}`" in lines and "- **workload**: `two {}`" in lines
    header = lines.index("## Summary") + 2
    assert cells(lines[header]) == [
        "phase",
        "channel",
        "trials",
        "iters",
        "time/iter",
        "IQR",
        "energy/iter",
        "IQR",
        "power",
        "dyn. energy/iter",
        "flags",
    ]
    rows = [cells(line) for line in lines[header + 2 :] if line.startswith("|")][:2]
    # the hostile name stays in its cell, escaped, and is not HTML
    assert rows[0][0] == r"a\|b &lt;img src=x&gt; \*c\*" and "<img" not in text
    windows = store.read_windows(out)
    for row in rows:
        phase = "add" if row[0] == "add" else HOSTILE
        group = windows[(windows["phase"] == phase) & (windows["channel"] == "gpu")]
        assert row[2] == str(len(group))
        assert row[4] == si(float(np.median(group["time_per_iter_s"])), "s")
        assert row[6] == si(float(np.median(group["energy_per_iter_j"])), "J")
    # the pipeline's derived tables
    assert "## two: per stage, per call (x count in the totals)" in lines
    assert "## two: pipeline totals per item" in lines


def test_stdout_when_not_saved_and_an_incomplete_run(capsys):
    result = ef.run(ListWorkload([busy_phase()]), power="none", reporters=["markdown"], settings=CONFIG)
    out = capsys.readouterr().out
    assert out.startswith("# list: complete\n") and "| busy | (timing only) | 3 |" in out
    broken = RunResult(
        {
            **result.meta,
            "status": "incomplete",
            "reason": "interrupted by SIGINT",
            "warnings": ["a | warning"],
        },
        result.windows,
        result.samples,
        result.summaries,
    )
    MarkdownReporter(path="-").report(broken, None)
    out = capsys.readouterr().out
    assert out.startswith("# list: incomplete\n")
    assert "- **status**: incomplete: interrupted by SIGINT" in out
    assert "## Warnings\n\n- a \\| warning" in out
    assert out.rstrip().endswith("**Run incomplete:** interrupted by SIGINT")


def test_listed_with_its_options():
    out = CliRunner().invoke(main, ["list", "reporters"]).output
    assert "markdown  [energyframe " in out and "path (str, not set)" in out
