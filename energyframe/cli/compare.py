"""``energyframe compare`` and ``energyframe report``: thin, as the rest of the CLI."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from ..results.paths import click_out_path
from .params import FiniteFloat, checked_path

CONTEXT = {"help_option_names": ["-h", "--help"]}
# the choices are spelled out here so that ``energyframe --help`` does not import numpy
FIGURE_CHOICES = ("time", "energy", "power", "dynamic")


#: compare.py's DEFAULT_ALPHA and DEFAULT_MIN_CHANGE_PCT, written out so that ``--help`` does not
#: import numpy (tests/compare/test_compare.py checks that they agree)
ALPHA = 0.05
MIN_CHANGE_PCT = 1.0


def comparison_options(lead: str):
    """``--figure``, ``--alpha`` and ``--min-change``, as ``compare`` and ``report`` take them;
    ``lead`` begins each help text (``report`` compares only when given several runs)."""

    def said(text: str) -> str:
        return f"{lead}{text}" if lead else text[0].upper() + text[1:]

    def add(command):
        for option in reversed(
            (
                click.option(
                    "--figure",
                    "figures",
                    multiple=True,
                    type=click.Choice(FIGURE_CHOICES),
                    help=said("figures to compare, repeatable. Default: time and energy (per iteration)."),
                ),
                click.option(
                    "--alpha",
                    type=FiniteFloat(0, 1, min_open=True, max_open=True),
                    default=ALPHA,
                    show_default=True,
                    help=said("significance level of the test over trials."),
                ),
                click.option(
                    "--min-change",
                    type=FiniteFloat(min=0),
                    default=MIN_CHANGE_PCT,
                    show_default=True,
                    help=said("changes smaller than this (in %) are never called significant."),
                ),
            )
        ):
            command = option(command)
        return command

    return add


def _labels(runs, labels) -> list[str]:
    if labels and len(labels) != len(runs):
        raise UsageError(f"give one --label per run: {len(runs)} run(s), {len(labels)} label(s)")
    if len(set(labels)) != len(labels):
        raise UsageError(f"labels must differ: {', '.join(labels)}")
    return list(labels)


@click.command(context_settings=CONTEXT)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--table",
    "table_format",
    type=click.Choice(["text", "md", "csv", "json"]),
    default="text",
    show_default=True,
    help="Output: a text table, Markdown, CSV (one line per row and run) or JSON.",
)
@comparison_options("")
@click.option("--all-channels", is_flag=True, help="Also compare secondary channels.")
@click.option("--label", "labels", multiple=True, help="A name per run, in order (default: directory names).")
@click.option("--no-derived", is_flag=True, help="Leave out the workload's derived totals.")
def compare(runs, table_format, figures, alpha, min_change, all_channels, labels, no_derived) -> None:
    """Compare runs against the first: per phase and channel, latency and energy, with a verdict.

    \b
    energyframe compare runs/before runs/after
    energyframe compare runs/a runs/b runs/c --table md > comparison.md
    """
    from ..compare import tables as compare_report
    from ..results import rundir

    if len(runs) < 2:
        raise UsageError(f"compare needs at least two run directories, got {len(runs)}")
    saved = rundir.load_all(runs, _labels(runs, labels))
    comparison = compare_report.compare_runs(
        saved,
        figures=figures or ("time", "energy"),
        alpha=alpha,
        min_change_pct=min_change,
        all_channels=all_channels,
        derived=not no_derived,
    )
    if table_format == "text":
        import shutil
        import sys

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 1000
        click.echo(compare_report.text_table(comparison, width=width), nl=False)
    elif table_format == "md":
        click.echo(compare_report.markdown_table(comparison), nl=False)
    elif table_format == "csv":
        from ..results.display import printable

        click.echo(printable(compare_report.csv_table(comparison), lines=True), nl=False)
        for note in compare_report.notes(comparison):  # stdout stays one CSV table
            click.echo(printable(note), err=True)
    else:
        click.echo(compare_report.json_table(comparison, saved), nl=False)


@click.command(context_settings=CONTEXT)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click_out_path(dir_okay=False),
    callback=checked_path,
    help="HTML file to write. Default: RUN/report.html for one run, report.html for several.",
)
@click.option("--label", "labels", multiple=True, help="A name per run, in order (default: directory names).")
@comparison_options("With several runs: ")
@click.option(
    "--max-points",
    type=click.IntRange(min=100),
    default=20000,
    show_default=True,
    help="Most points drawn per channel in the power trace (min/max per bucket beyond).",
)
def report(runs, out, labels, figures, alpha, min_change, max_points) -> None:
    """Write one self-contained HTML report of a run, or of a comparison of runs.

    \b
    energyframe report runs/x                       # runs/x/report.html
    energyframe report runs/a runs/b --out ab.html  # a comparison, and each run
    """
    from ..report.html import write_report
    from ..results import rundir

    saved = rundir.load_all(runs, _labels(runs, labels))
    target = out or (Path(runs[0]) / "report.html" if len(runs) == 1 else Path("report.html"))
    path = write_report(
        saved,
        target,
        figures=figures or ("time", "energy"),
        alpha=alpha,
        min_change_pct=min_change,
        max_points=max_points,
    )
    click.echo(f"wrote {path}")


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook: ``energyframe compare`` and ``energyframe report``."""
    cli.add_command(compare)
    cli.add_command(report)
