"""Every malformed file a command can meet: one line ``Error: ...`` naming the file and the
cause, exit 1 or 2, no traceback, no hang, and nothing written that claims success.

Each case damages one file of a valid run directory, power log or trace directory, and runs the
real command line (click's CliRunner) on it.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import energyframe as ef
from tests.fakes import ListWorkload, SignalSource, busy_phase, invoke_within

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: no command may take longer than this on a malformed file. Units: s.
HANG_S = 120


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A small complete run with a power source: run.json, windows.csv, samples.parquet."""
    out = tmp_path_factory.mktemp("template") / "run"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu", watts=200.0)],
        reporters=[],
        out=out,
        settings=ef.RunConfig(trials=2, min_window_s=0.05, warmup_s=0.0),
    )
    return out


@dataclass(frozen=True)
class Case:
    """One command on one damaged file.

    Args:
        damage: given a fresh copy of the template run (``run``) and a scratch folder, damages
            a file and returns ``(argv, the damaged file, outputs that must not appear)``.
        cause: words of the error that say what is wrong.
    """

    id: str
    damage: Callable[[Path, Path], tuple[list[str], Path, list[Path]]]
    code: int
    cause: str


# -- the damage --------------------------------------------------------------------------------


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


WATTSUP = "time,id,pm1,pm2,sum\n" + "".join(
    f"2026-02-04 10:15:{20 + i:02d},{i},125.3,118.7,244.0\n" for i in range(30)
)
BINARY = bytes(range(256)) * 4


def analyze_log(log: Callable[[Path], Path]):
    """``analyze`` of a damaged power log over a window of the earlier tool's day."""

    def damage(run: Path, tmp: Path):
        path = log(tmp)
        out = tmp / "results"
        argv = ["analyze", "--power-log", str(path), "--window", "2026-02-04 10:15:25,2026-02-04 10:15:40"]
        return [*argv, "--out", str(out)], path, [out / "energy_report.json", out / "windows.csv"]

    return damage


def analyze_run(damage_run: Callable[[Path], Path]):
    """``analyze`` of a run's own samples over the windows of its (damaged) directory."""

    def damage(run: Path, tmp: Path):
        path = damage_run(run)
        out = tmp / "results"
        argv = ["analyze", "--power-log", str(run / "samples.parquet"), "--run", str(run), "--out", str(out)]
        return argv, path, [out / "energy_report.json", out / "windows.csv"]

    return damage


def on_run(command: str, damage_run: Callable[[Path], Path]):
    """``show`` or ``plot`` of a run directory with one damaged file."""

    def damage(run: Path, tmp: Path):
        path = damage_run(run)
        return [command, str(run)], path, [run / "power-trace.png"]

    return damage


def truncated(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def run_json(content) -> Callable[[Path], Path]:
    def damage(run: Path) -> Path:
        text = content if isinstance(content, (str, bytes)) else json.dumps(content)
        return write(run / "run.json", text)

    return damage


def run_json_with(**fields) -> Callable[[Path], Path]:
    def damage(run: Path) -> Path:
        meta = json.loads((run / "run.json").read_text())
        meta.update(fields)
        return write(run / "run.json", json.dumps(meta))

    return damage


def nested_in_workload_info(run: Path) -> Path:
    """A run.json that parses, with 900 lists nested in a free-form field (a reader that walks
    it recursively would overflow the stack)."""
    meta = json.loads((run / "run.json").read_text())
    meta["workload"]["info"] = {"x": "NESTED"}
    return write(run / "run.json", json.dumps(meta).replace('"NESTED"', "[" * 900 + "]" * 900))


def utf_16_run_json(run: Path) -> Path:
    """run.json saved again by an editor in UTF-16 (with its byte-order mark)."""
    return write(run / "run.json", (run / "run.json").read_text().encode("utf-16"))


def on_two_runs(command: str, damage_run: Callable[[Path], Path]):
    """``compare`` or ``report`` of a damaged run against a whole copy of it."""

    def damage(run: Path, tmp: Path):
        good = Path(shutil.copytree(run, tmp / "good"))
        path = damage_run(run)
        argv = [command, str(good), str(run)]
        out = tmp / "report.html"
        return (argv + ["--out", str(out)] if command == "report" else argv), path, [out]

    return damage


def phase_spread_as_text(run: Path) -> Path:
    meta = json.loads((run / "run.json").read_text())
    meta["phases"][0]["time_per_iter_s"]["median"] = "fast"
    return write(run / "run.json", json.dumps(meta))


def windows_csv(content: bytes | str) -> Callable[[Path], Path]:
    return lambda run: write(run / "windows.csv", content)


def text_in_start_s(run: Path) -> Path:
    lines = (run / "windows.csv").read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[1].split(",")
    fields[header.index("start_s")] = "yesterday"
    lines[1] = ",".join(fields)
    return write(run / "windows.csv", "\n".join(lines) + "\n")


def a_file_not_a_directory(run: Path, tmp: Path, command: str):
    path = write(tmp / "not-a-run.txt", "hello\n")
    return [command, str(path)], path, [tmp / "power-trace.png"]


def trace_import(content: Callable[[Path], Path]):
    def damage(run: Path, tmp: Path):
        path = content(tmp)
        out = tmp / "trace"
        return ["trace", "import", str(path), "--out", str(out)], path, [out / "trace_meta.json"]

    return damage


def replay_trace(name: str, content: bytes | str):
    """``run --workload replay:trace=DIR`` on a trace directory with one damaged file."""

    def damage(run: Path, tmp: Path):
        trace = tmp / "trace"
        write(trace / "ops.jsonl", json.dumps(OP) + "\n")
        write(trace / "kernels.jsonl", "")
        write(trace / "trace_meta.json", json.dumps({"workload": None, "iterations": 1, "gpu_time_us": 3.0}))
        path = write(trace / name, content)
        out = tmp / "replayed"
        argv = ["run", "--power", "none", "--workload", f"replay:trace={trace},full=none", "--out", str(out)]
        return argv, path, [out / "run.json", out / "windows.csv", out / "comparison_report.json"]

    return damage


OP = {
    "name": "aten::add",
    "count": 1,
    "count_per_iteration": 1.0,
    "gpu_time_us": 3.0,
    "input_dims": [[4], [4]],
}


def kineto_events(events) -> Callable[[Path], Path]:
    return lambda tmp: write(tmp / "trace.json", json.dumps(events))


def truncated_gzip(tmp: Path) -> Path:
    data = (FIXTURES / "kineto-h200" / "bloom-tiny.json.gz").read_bytes()
    return write(tmp / "trace.json.gz", data[: len(data) // 2])


def parquet_of_other_columns(tmp: Path) -> Path:
    import pandas as pd

    path = tmp / "other.parquet"
    pd.DataFrame({"a": [1.0], "b": [2.0]}).to_parquet(path)
    return path


CASES = [
    # analyze: power logs
    Case("analyze-empty-log", analyze_log(lambda t: write(t / "p.csv", b"")), 2, "is empty"),
    Case("analyze-blank-log", analyze_log(lambda t: write(t / "p.csv", b"\n\n  \n")), 2, "is empty"),
    Case("analyze-binary-log", analyze_log(lambda t: write(t / "p.csv", BINARY)), 2, "is binary"),
    Case(
        "analyze-truncated-log",
        analyze_log(lambda t: write(t / "p.csv", WATTSUP[: len(WATTSUP) - 9])),
        2,
        "is truncated: its last line (31: '2026-02-04 10:15:49,29,125.3,118') ends in the middle of a row",
    ),
    Case(
        "analyze-log-cut-in-its-last-number",
        analyze_log(lambda t: write(t / "p.csv", WATTSUP[: len(WATTSUP) - 4])),  # sum 244.0 cut to 24
        2,
        "is truncated",
    ),
    Case(
        "analyze-header-only-log",
        analyze_log(lambda t: write(t / "p.csv", "time,id,pm1,pm2,sum\n")),
        2,
        "has a header but no rows",
    ),
    Case(
        "analyze-log-of-garbage-rows",
        analyze_log(lambda t: write(t / "p.csv", "time,id,pm1,pm2,sum\n\x00\x1b[0m###\ngarbage,1,2,3,4\n")),
        2,
        "line 3: cannot read the time 'garbage'",
    ),
    Case(
        "analyze-nvidia-smi-log-of-garbage",
        analyze_log(
            lambda t: write(
                t / "nvidia-smi.csv",
                "timestamp, index, power.draw [W]\n" + "\x00\x1b[0m###### garbage ######\n" * 30,
            )
        ),
        2,
        "has no rows (line 2: '\\x00\\x1b[0m###### garbage ######' is not one)",
    ),
    Case(
        "analyze-unknown-log",
        analyze_log(lambda t: write(t / "p.csv", "a,b\n1,2\n")),
        2,
        "is not a power log",
    ),
    Case(
        "analyze-corrupt-parquet",
        analyze_log(lambda t: truncated(Path(shutil.copy(t / "run" / "samples.parquet", t / "s.parquet")))),
        2,
        "is not a readable parquet file",
    ),
    Case(
        "analyze-parquet-not-samples",
        analyze_log(parquet_of_other_columns),
        2,
        "lacks column(s) ['channel', 'time_s', 'value', 'unit'] of a samples.parquet",
    ),
    # analyze: a run directory's windows
    Case("analyze-run-binary-windows", analyze_run(windows_csv(BINARY)), 1, "cannot be read"),
    Case("analyze-run-empty-windows", analyze_run(windows_csv(b"")), 1, "cannot be read (EmptyDataError"),
    Case(
        "analyze-run-windows-of-other-columns",
        analyze_run(windows_csv("a,b\n1,2\n")),
        1,
        "lacks the column(s) ['phase', 'trial'] of a windows.csv",
    ),
    Case(
        "analyze-run-text-in-start_s",
        analyze_run(text_in_start_s),
        1,
        "has text in its numeric column start_s (row 2: 'yesterday')",
    ),
    Case(
        "analyze-timing-json-list",
        lambda run, tmp: (
            [
                "analyze",
                "--power-log",
                str(write(tmp / "p.csv", WATTSUP)),
                "--timing",
                str(write(tmp / "timing.json", "[1, 2]")),
                "--out",
                str(tmp / "results"),
            ],
            tmp / "timing.json",
            [tmp / "results" / "energy_report.json"],
        ),
        2,
        "is not the earlier tool's timing JSON (an object), it holds a list",
    ),
    # show and plot: a run directory with one damaged file
    *[
        Case(f"{command}-{name}", on_run(command, damage), 1, cause)
        for command in ("show", "plot")
        for name, damage, cause in [
            (
                "truncated-parquet",
                lambda run: truncated(run / "samples.parquet"),
                "it is truncated or corrupt",
            ),
            ("binary-windows", windows_csv(BINARY), "cannot be read"),
            ("text-in-start_s", text_in_start_s, "has text in its numeric column start_s"),
            ("run-json-list", run_json([]), "should hold a JSON object, but holds a list"),
            ("run-json-truncated", lambda run: truncated(run / "run.json"), "is not valid JSON"),
            ("run-json-binary", run_json(BINARY), "is not text"),
            # a RecursionError traceback once, in show, compare and report
            ("run-json-nested-200000-deep", run_json("[" * 200_000 + "]" * 200_000), "levels deep"),
            ("run-json-nested-in-a-field", nested_in_workload_info, "nests its values more than 64 levels deep"),
            ("run-json-utf-16", utf_16_run_json, "is UTF-16 text; energyframe reads and writes it as UTF-8"),
            ("sources-as-text", run_json_with(sources="nvml"), "'sources' should be a list, not a string"),
            (
                "warnings-as-number",
                run_json_with(warnings=3),
                "'warnings' should be a list, not a number (3)",
            ),
            ("status-as-number", run_json_with(status=1), "'status' should be a string, not a number (1)"),
            (
                "channel-without-quantity",
                run_json_with(sources=[{"name": "x", "channels": [{"name": "c"}]}]),
                "sources[0].channels[0].quantity should be energy, power or state, not null",
            ),
            (
                "phase-spread-as-text",
                phase_spread_as_text,
                "phases[0].time_per_iter_s should be an object of numbers",
            ),
        ]
    ],
    *[
        Case(f"{command}-run-json-nested-200000-deep", on_two_runs(command, run_json("[" * 200_000 + "]" * 200_000)),
             1, "levels deep")
        for command in ("compare", "report")
    ],
    Case(
        "show-a-file",
        lambda run, tmp: a_file_not_a_directory(run, tmp, "show"),
        1,
        "is a file, not a run directory",
    ),
    Case(
        "plot-a-file",
        lambda run, tmp: a_file_not_a_directory(run, tmp, "plot"),
        1,
        "is a file, not a run directory",
    ),
    # trace import
    Case(
        "trace-import-json-list",
        trace_import(kineto_events([1, 2, 3])),
        2,
        "event 0 is int 1, not an object",
    ),
    Case(
        "trace-import-text-ts",
        trace_import(
            kineto_events([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": "soon", "dur": 3}])
        ),
        2,
        "event 0 ('aten::mm') has ts 'soon', not a number",
    ),
    Case(
        "trace-import-negative-dur",
        trace_import(
            kineto_events(
                [
                    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100, "dur": 5, "args": {}},
                    {"ph": "X", "cat": "kernel", "name": "add", "ts": 102, "dur": -105, "args": {}},
                ]
            )
        ),
        2,
        "event 1 ('add') has dur -105, a negative duration (the profiler records none below 0 µs)",
    ),
    Case(
        "trace-import-not-utf8",
        trace_import(lambda tmp: write(tmp / "trace.json", b'{"traceEvents": [{"name": "\xff\xfe"}]}')),
        2,
        "is not UTF-8 text",
    ),
    Case(
        "trace-import-gzip-not-utf8",
        trace_import(
            lambda tmp: write(tmp / "trace.json.gz", gzip.compress(b'{"traceEvents": ["\xc3\x28"]}'))
        ),
        2,
        "is not UTF-8 text",
    ),
    Case("trace-import-truncated-gzip", trace_import(truncated_gzip), 2, "is it truncated?"),
    # run --workload replay:trace=DIR
    Case(
        "replay-truncated-trace-meta",
        replay_trace("trace_meta.json", '{"workload": "bloom-560m", "iter'),
        2,
        "is not valid JSON (line 1, column 28: Unterminated string",
    ),
    Case(
        "replay-trace-meta-list",
        replay_trace("trace_meta.json", "[]"),
        2,
        "should hold a JSON object, not a list",
    ),
    Case(
        "replay-trace-meta-wrong-type",
        replay_trace("trace_meta.json", json.dumps({"iterations": "three"})),
        2,
        'iterations should be int, not "three"',
    ),
    Case(
        "replay-trace-meta-binary",
        replay_trace("trace_meta.json", BINARY),
        2,
        "is not UTF-8 text",
    ),
    Case(
        "replay-ops-not-objects",
        replay_trace("ops.jsonl", "[1, 2]\n"),
        2,
        "line 1 is list, not a JSON object",
    ),
    Case(
        "replay-op-without-name",
        replay_trace("ops.jsonl", json.dumps({k: v for k, v in OP.items() if k != "name"}) + "\n"),
        2,
        "record 1: lacks ['name']",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_malformed_file_is_a_one_line_error(case: Case, template: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(template, run)
    argv, bad_file, outputs = case.damage(run, tmp_path)
    result = invoke_within(argv, HANG_S, f"the command ran longer than {HANG_S} s on a malformed file")
    assert isinstance(result.exception, SystemExit), f"{type(result.exception).__name__}: {result.exception}"
    assert result.exit_code == case.code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    (error,) = errors
    assert result.output.endswith(error + "\n"), result.output  # the message is one line, and the last
    assert str(bad_file) in error, error
    assert case.cause in error, error
    assert "wrote" not in result.output
    for path in outputs:
        assert not path.exists(), f"{path} was written although the command failed"


def test_the_python_api_names_the_file_of_a_utf_16_or_deeply_nested_run_json(template: Path, tmp_path: Path):
    for name, damage in (("utf16", utf_16_run_json), ("nested", run_json("[" * 200_000 + "]" * 200_000))):
        run = Path(shutil.copytree(template, tmp_path / name))
        damage(run)
        with pytest.raises(ef.StoreError) as raised:  # not a UnicodeDecodeError, not a RecursionError
            ef.load_run(run)
        assert str(raised.value).startswith(f"{run / 'run.json'} ")


def test_a_tampered_summary_is_recomputed_from_windows_csv_and_said(template: Path, tmp_path: Path):
    run = Path(shutil.copytree(template, tmp_path / "run"))
    meta = json.loads((run / "run.json").read_text())
    summary = next(p for p in meta["phases"] if p["channel"] == "gpu")
    true_j = summary["energy_per_iter_j"]["median"]
    summary["energy_per_iter_j"]["median"] = 999.0  # beside windows of a few joules
    (run / "run.json").write_text(json.dumps(meta))
    result = ef.load_run(run)
    assert result.summary("busy").energy_per_iter_j.median == pytest.approx(true_j)
    (warning,) = [w for w in result.warnings if "disagree" in w]
    assert warning.startswith(f"run.json's phase summaries disagree with windows.csv (busy [gpu]: energy/iter 999 J in "
                              f"run.json, {true_j:.4g} J from its windows)")
    assert warning.endswith("the figures shown are computed from windows.csv")
    shown = invoke_within(["show", str(run)], HANG_S, "show hung")
    assert shown.exit_code == 0 and "disagree with windows.csv" in shown.output and "999 J" not in shown.output.split(
        "warning")[0]


def test_an_untouched_run_gives_no_such_warning(template: Path):
    assert not [w for w in ef.load_run(template).warnings if "disagree" in w]


def test_a_windows_csv_without_energy_is_refused(template: Path, tmp_path: Path):
    run = Path(shutil.copytree(template, tmp_path / "run"))
    import pandas as pd

    pd.read_csv(run / "windows.csv").drop(columns=["energy_j"]).to_csv(run / "windows.csv", index=False)
    r = invoke_within(["show", str(run)], HANG_S, "show hung")
    assert r.exit_code == 1
    assert r.output == (
        f"Error: {run / 'windows.csv'} lacks the column(s) ['energy_j'] that every windows.csv holds (each window's "
        "figures): the file is damaged; restore it, or delete it to see the run from run.json alone\n"
    )
