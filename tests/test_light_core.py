"""The core without torch: ``pip install energyframe`` measures commands with NVML and nvidia-smi
and runs analyze, compare, report and show; what needs torch says which extra, in one line.

Each command runs in a child process where the modules that only the extras install (torch,
torchvision, transformers, timm, matplotlib, ...: read from energyframe's own package metadata)
cannot be imported, as on a machine with ``pip install energyframe`` alone (a ``sitecustomize``
import hook)."""

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
#: the extras whose packages a core install lacks (the test tools' extra is the runner's own)
EXTRAS = ("torch", "models", "plots", "browser", "cuda12", "cuda13")
BLOCKER = textwrap.dedent(
    """
    import sys

    HIDDEN = {hidden!r}

    class _NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, _NotInstalled())
    """
)


def _dist(requirement: str) -> str:
    return re.split(r"[\s<>=!;\[~]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def extra_only_modules() -> set[str]:
    """Top-level modules of the packages that only the extras bring, not the core."""
    core, extras = set(), set()
    for requirement in md.requires("energyframe") or []:
        marker = re.search(r"extra\s*==\s*['\"]([^'\"]+)", requirement)
        if marker is None:
            core.add(_dist(requirement))
        elif marker.group(1) in EXTRAS:
            extras.add(_dist(requirement))
    dists = extras - core - {"energyframe"}
    hidden = {
        module
        for module, owners in md.packages_distributions().items()
        if any(owner.lower().replace("_", "-") in dists for owner in owners)
    }
    return hidden | {d.replace("-", "_") for d in dists}


@pytest.fixture
def no_torch(tmp_path, monkeypatch):
    """Children of this test cannot import torch; returns a runner of ``energyframe ARGS``."""
    hook = tmp_path / "no-torch"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BLOCKER.format(hidden=sorted(extra_only_modules())))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))

    def energyframe(*args: object) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "energyframe", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )

    return energyframe


def test_the_hook_hides_what_only_the_extras_install(no_torch, tmp_path):
    assert {"torch", "torchvision", "transformers", "timm", "matplotlib"} <= extra_only_modules()
    assert not {"pandas", "numpy", "plotly", "jinja2", "pynvml", "prometheus_client"} & extra_only_modules()
    for module in ("torch", "matplotlib"):
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
        assert proc.returncode == 1 and f"No module named '{module}'" in proc.stderr


@pytest.mark.slow
def test_core_commands_run_without_torch(no_torch, fake_nvml, fake_smi, tmp_path):
    fake_nvml()
    runs = tmp_path / "runs"
    for name, power in (("a", "nvml:mode=thread"), ("b", "nvml:mode=thread"), ("smi", "nvidia-smi")):
        proc = no_torch("run", "--power", power, "--idle", "0", "--trials", "1", "--out", runs / name, "--", "sleep", "1")
        assert proc.returncode == 0, proc.stderr
        run = json.loads((runs / name / "run.json").read_text())
        assert run["status"] == "complete"
    for args in (
        ("show", runs / "a"),
        ("compare", runs / "a", runs / "b"),
        ("report", runs / "a", "--out", tmp_path / "a.html"),
        ("analyze", "--power-log", FIXTURES / "nvidia-smi-sample-h200.csv", "--tz", "UTC",
         "--window", "2026-11-22 03:41:38.3,2026-11-22 03:41:39.1", "--out", tmp_path / "analyzed"),
    ):
        proc = no_torch(*args)
        assert proc.returncode == 0, (args[0], proc.stderr)
    assert (tmp_path / "a.html").stat().st_size > 0 and (tmp_path / "analyzed" / "energy_report.json").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (("run", "--power", "none", "--workload", "matmul"), "workload 'matmul' needs torch: pip install 'energyframe[torch]'"),
        (("run", "--power", "none", "--workload", "resnet50"), "workload 'resnet50' needs torchvision: pip install 'energyframe[models]'"),
        (("run", "--power", "none", "--workload", "hf:arch=gpt2"), "workload 'hf' needs transformers: pip install 'energyframe[models]'"),
        (("run", "--power", "none", "--workload", "replknet31b"), "workload 'replknet31b' needs torch: pip install 'energyframe[torch]'"),
        (("trace", "--workload", "matmul", "--out", "t"), "energyframe trace needs torch: pip install 'energyframe[torch]'"),
    ],
    ids=["kernel", "named-model", "hf", "model-implemented-here", "trace"],
)
def test_what_needs_torch_names_its_extra_in_one_line(no_torch, args, message):
    proc = no_torch(*args)
    assert proc.returncode == 2 and proc.stderr == f"Error: {message}\n" and proc.stdout == ""
