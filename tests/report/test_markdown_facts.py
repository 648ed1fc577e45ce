"""report.md's facts and closing lines (``report/markdown.py``), for the parts of a run the
reporter's end-to-end tests do not reach: the GPU models, the measured command's exit code, a run
without a finished window."""

import copy

from energyframe.report.markdown import run_markdown
from energyframe.results.result import RunResult
from energyframe.testing.results import sample_result


def facts(text: str) -> list[str]:
    """The names of the page's facts, in order."""
    return [line.split("**")[1] for line in text.splitlines() if line.startswith("- **")]


def test_the_facts_name_the_gpus_the_version_and_the_measured_commands_exit_code():
    result = sample_result()
    meta = copy.deepcopy(dict(result.meta))
    meta["exit_code"] = 3
    meta["sources"][0]["info"]["gpus"] = [{"name": "NVIDIA H200"}]
    meta["workload"]["info"] = {"gpu": "NVIDIA A100"}  # the GPU the workload itself saw
    meta["versions"] = {**meta["versions"], "energyframe": "9.9"}
    text = run_markdown(RunResult(meta, result.windows, result.samples, tuple(result.summaries)))
    lines = text.splitlines()
    assert facts(text) == [
        "status", "workload", "power sources", "GPU", "started", "ended", "energyframe",
        "exit code of the measured command",
    ]  # fmt: skip
    assert "- **GPU**: NVIDIA A100, NVIDIA H200" in lines and "- **energyframe**: 9.9" in lines
    assert "- **exit code of the measured command**: 3" in lines
    assert "- **workload**: `tiny {}`" in lines


def test_a_run_without_a_finished_window_says_so_and_ends_on_why_it_is_incomplete(tmp_path):
    result = sample_result()
    meta = {**copy.deepcopy(dict(result.meta)), "status": "incomplete", "reason": "killed *hard*"}
    text = run_markdown(RunResult(meta, result.windows.iloc[0:0], result.samples, ()), tmp_path)
    lines = text.splitlines()
    assert lines[0] == "# tiny: incomplete"
    assert facts(text)[:3] == ["status", "run directory", "workload"]
    assert f"- **run directory**: `{tmp_path}`" in lines
    assert lines[lines.index("## Summary") + 2] == "No phase summaries (no window finished)."
    assert lines[-1] == r"**Run incomplete:** killed \*hard\*"
