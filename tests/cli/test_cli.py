"""Every command and every error path of the CLI, through click's runner and as a real process."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from energyframe.cli import main
from energyframe.kit import registry
from energyframe.results.result import RunResult, load_run

POWER_NAMES = ", ".join(registry.names(registry.POWER))
WORKLOAD_NAMES = ", ".join(registry.names(registry.WORKLOADS))
REPORTER_NAMES = ", ".join(registry.names(registry.REPORTERS))
FAST = ["--trials", "2", "--min-window", "0.05", "--warmup-s", "0"]


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_help_and_version():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("list", "run", "show"):
        assert command in result.output
    assert invoke("-h").output == result.output
    assert invoke("--version").output.startswith("energyframe, version ")


def test_runs_option_reaches_the_run(tmp_path):
    out = tmp_path / "run"
    spec = "cpu-matmul:sizes=8"
    result = invoke(
        "run", "--workload", spec, "--runs", "100000", "--out", str(out), *FAST, "--min-window", "0.005"
    )
    assert result.exit_code == 0, result.output
    assert list(RunResult.load(out).windows["iterations"]) == [50000, 50000]  # 2 trials
    assert invoke("run", "--workload", spec, "--runs", "0").exit_code == 2


def test_list_shows_every_kind_with_options():
    result = invoke("list")
    assert result.exit_code == 0
    out = result.output
    assert "power sources (energyframe.power):" in out
    assert "replay  [energyframe " in out
    assert "file (path, required)" in out
    assert "cpu-matmul" in out and "sizes (int_list, default 256)" in out
    assert "console" in out and "csv" in out and "json" in out


def test_list_commands_names_every_command_a_plugin_adds():
    out = invoke("list", "commands").output
    assert "compare  [energyframe.cli.compare]  adds: compare, report" in out
    assert "sweep  [energyframe.sweeps.cli]  adds: merge, sweep" in out
    listed = {c.strip() for line in out.splitlines() if "adds: " in line for c in line.split("adds: ")[1].split(",")}
    assert listed == set(main.commands) - {"list", "run", "show"}


def test_list_one_kind():
    out = invoke("list", "reporters").output
    assert "reporters (energyframe.reporters):" in out
    assert "workloads" not in out


def test_run_and_show(power_csv, tmp_path):
    csv = power_csv(120.0, period_s=0.02, duration_s=3.0)
    out = tmp_path / "run"
    result = invoke(
        "run", "--power", f"replay:file={csv}", "--workload", "cpu-matmul:sizes=32", "--out", str(out), *FAST
    )
    assert result.exit_code == 0, result.output
    assert "matmul-32" in result.output and "120 W" in result.output
    assert f"saved in {out}" in result.output
    shown = invoke("show", str(out))
    assert shown.exit_code == 0
    assert "status:   complete" in shown.output
    assert "matmul-32" in shown.output and "120 W" in shown.output
    windows = invoke("show", str(out), "--windows").output
    assert "+0.000 s" in windows and "time/iter" in windows  # starts relative to the first window


def test_run_with_file_reporters_to_stdout(tmp_path):
    result = invoke(
        "run",
        "--power",
        "none",
        "--workload",
        "cpu-matmul:sizes=16",
        "--out",
        str(tmp_path / "r"),
        "--reporter",
        "json:path=-",
        "--reporter",
        "csv",
        *FAST,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert data["status"] == "complete" and data["phases"][0]["phase"] == "matmul-16"
    assert (
        (tmp_path / "r" / "summary.csv")
        .read_text()
        .startswith("phase,channel,trials,iterations,time_per_iter_s_n")
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--power", "nvm", "--workload", "sleep"],
            f"Error: unknown power source 'nvm'. Did you mean 'nvml'? Available: {POWER_NAMES}\n",
        ),
        (
            ["--workload", "resnet"],
            f"Error: unknown workload 'resnet'. Did you mean 'resnet50' or 'resnet18'? Available: {WORKLOAD_NAMES}\n",
        ),
        (
            ["--workload", "sleep", "--reporter", "html"],
            f"Error: unknown reporter 'html'. Available: {REPORTER_NAMES}\n",  # nothing close: no guess
        ),
        (
            ["--workload", "sleep:second=1"],
            "Error: unknown option 'second' for workload 'sleep'. Valid options: seconds\n",
        ),
        (
            ["--workload", "sleep:seconds=soon"],
            "Error: option 'seconds' of workload 'sleep' expects a number, got 'soon'\n",
        ),
        (
            ["--workload", "cpu-matmul:sizes=0"],
            "Error: option 'sizes' of workload 'cpu-matmul' must be >= 1, got 0\n",
        ),
        (
            ["--power", "replay", "--workload", "sleep"],
            "Error: power source 'replay' needs option 'file': samples.parquet, a CSV with time_s and power_w "
            "or energy_j, the earlier tool's time,id,pm1,pm2,sum CSV, or an nvidia-smi CSV log\n",
        ),
        (
            ["--power", "none", "--power", "replay:file=x", "--workload", "sleep"],
            "Error: --power none cannot be combined with other power sources\n",
        ),
        (["--workload", "sleep:"], None),
        ([], "Error: nothing to measure: give --workload SPEC or a command after --\n"),
        (
            ["--workload", "sleep", "--", "true"],
            "Error: give either --workload or a command after --, not both\n",
        ),
        (
            ["--", "no-such-program-xyz"],
            "Error: command not found or not executable: 'no-such-program-xyz'\n",
        ),
    ],
)
def test_bad_input_exits_2_before_anything_starts(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", *args, *FAST])
    if message is None:  # a valid spec with an empty option list
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    assert result.output.endswith(message)
    assert not (tmp_path / "runs").exists()  # nothing was started or written


def test_missing_replay_file_is_a_clean_error(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--power",
            f"replay:file={tmp_path}/nope.csv",
            "--workload",
            "sleep",
            "--out",
            str(tmp_path / "r"),
            *FAST,
        ],
    )
    assert result.exit_code == 1
    assert result.output.endswith(
        f"Error: power source 'replay' could not start: replay file '{tmp_path}/nope.csv' does not exist\n"
    )


def test_show_errors(tmp_path):
    result = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == f"Error: {tmp_path} is not a run directory: it has no run.json\n"
    (tmp_path / "run.json").write_text('{"format_version": 99}')
    result = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert result.output == (
        f"Error: {tmp_path} has run format version 99; this energyframe reads versions 1 to 2. "
        "Upgrade energyframe to read it.\n"
    )


def test_default_output_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "--power", "none", "--workload", "sleep:seconds=0.01", *FAST)
    assert result.exit_code == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.endswith("Z-sleep")
    assert RunResult.load(run_dir).complete


# -- as a real process: a measured command, signals ------------------------------------------


def energyframe(*args, **kw):
    return subprocess.run([sys.executable, "-m", "energyframe", *args], capture_output=True, text=True, **kw)


def test_measured_command_exit_code_is_recorded_and_returned(tmp_path):
    out = tmp_path / "r"
    proc = energyframe(
        "run",
        "--power",
        "none",
        "--out",
        str(out),
        "--",
        sys.executable,
        "-c",
        "import sys, time; time.sleep(0.2); sys.exit(3)",
    )
    assert proc.returncode == 3, proc.stderr
    result = RunResult.load(out)
    assert result.status == "complete"
    assert result.meta["exit_code"] == 3
    assert result.meta["workload"]["info"]["exit_codes"] == [3]
    (window,) = result.windows.itertuples()
    assert window.phase == "command" and window.iterations == 1 and window.duration_s >= 0.2


def test_measured_command_gets_no_shell(tmp_path):
    marker = tmp_path / "marker"
    proc = energyframe(
        "run",
        "--power",
        "none",
        "--out",
        str(tmp_path / "r"),
        "--",
        "echo",
        f"$(touch {marker})",
        ";",
        "touch",
        str(marker),
    )
    assert proc.returncode == 0
    assert not marker.exists()
    assert f"$(touch {marker}) ; touch {marker}" in proc.stdout


def start_long_run(csv, out, **popen_kw) -> subprocess.Popen:
    """``energyframe run`` of a replayed power log for long enough to be stopped midway."""
    # quiet: a SIGTERM that lands while a progress line is written is lost (test_orchestrator)
    argv = [sys.executable, "-m", "energyframe", "-q", "run", "--power", f"replay:file={csv}"]
    argv += ["--workload", "sleep:seconds=0.2", "--trials", "1000", "--out", str(out)]
    return subprocess.Popen(argv, **popen_kw)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig,code,reason",
    [(signal.SIGINT, 130, "interrupted by SIGINT"), (signal.SIGTERM, 130, "terminated by SIGTERM")],
)
def test_signal_saves_an_incomplete_run(tmp_path, power_csv, sig, code, reason):
    csv = power_csv(90.0, period_s=0.05, duration_s=60.0)
    out = tmp_path / "r"
    proc = start_long_run(
        csv,
        out,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell starts background jobs with SIGINT ignored, and Python keeps it so: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for_windows(out, 3)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert f"Error: {reason}" in stderr
    result = RunResult.load(out)
    assert result.status == "incomplete" and result.reason == reason
    assert len(result.windows) >= 3  # the windows measured before the signal are kept
    assert len(result.samples) > 10
    assert not (out / "samples.partial.csv").exists()


def wait_for_windows(out, count, timeout_s=120.0):
    """Until the run's journal holds ``count`` closed windows (a loaded machine starts slowly)."""
    journal = out / "windows.partial.csv"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count("\nclosed,") >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run did not close {count} windows within {timeout_s} s")


@pytest.mark.slow
def test_killed_run_leaves_its_samples_and_windows_readable(tmp_path, power_csv):
    csv = power_csv(90.0, period_s=0.05, duration_s=60.0)
    out = tmp_path / "r"
    proc = start_long_run(csv, out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_windows(out, 3)
    partial = out / "samples.partial.csv"
    deadline = time.monotonic() + 60  # samples reach the disk once a second: wait for a drain
    while partial.read_text().count("\n") < 25 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rebuilt = load_run(out)  # the windows that had closed, integrated from the partial samples
    assert rebuilt.status == "incomplete"
    assert rebuilt.samples_origin == "samples.partial.csv"
    assert len(rebuilt.samples) >= 4
    assert (
        rebuilt.reason
        == f"the run's process (pid {proc.pid}) died before the run finished; what it had recorded is shown"
    )
    assert len(rebuilt.windows) >= 3
    covered = rebuilt.windows["mean_power_w"].dropna()
    assert len(covered) >= 1 and covered.round(6).eq(90.0).all()
    assert rebuilt.windows[rebuilt.windows["energy_j"].isna()]["flags"].str.contains("uncovered").all()
    same = RunResult.load(out)  # the public loader is the same loader
    assert same.reason == rebuilt.reason and same.windows.equals(rebuilt.windows)
    shown = energyframe("show", str(out))
    assert "recovered from samples.partial.csv" in shown.stdout
    assert "rebuilt from windows.partial.csv" in shown.stdout and "sleep" in shown.stdout
