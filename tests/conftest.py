"""Shared fixtures: power profiles for the replay source, real plugin installation, and the
lowest-layer fakes of NVML (a ``pynvml`` module) and of ``nvidia-smi`` (an executable on PATH)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from energyframe.kit import registry
from energyframe.results.provenance import library_versions

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """A module of benchmarks/ by its file name. The folder goes on the path, since the
    benchmarks import one another by name (``step_family`` imports ``cycle_truth``)."""
    import importlib.util

    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pytest_configure(config):
    """Ctrl-C handled as Python does by default, however the tests were started: a shell script
    that starts them in the background (``pytest &``) hands them SIGINT ignored, and the tests
    that stop a run, a child or an analysis with SIGINT would then wait for nothing. Children
    started by the tests get the default handler back with it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # the GPU suite is one process on one GPU: workers of `pytest -n` would share the GPU, and
    # the tests that measure it would measure each other
    if getattr(config.option, "numprocesses", None) and selects_gpu_tests(config.option.markexpr or ""):
        raise pytest.UsageError("the GPU tests run in one process: `pytest -m gpu` without -n")


def selects_gpu_tests(markexpr: str) -> bool:
    """Whether ``-m markexpr`` selects a test marked ``gpu`` alone (an expression of marker names,
    and, or, not and parentheses; anything else is not judged)."""
    tokens = re.findall(r"[()]|[^\s()]+", markexpr)
    words = {"and", "or", "not", "(", ")"}
    if not tokens or not all(t in words or t.isidentifier() for t in tokens):
        return False
    python = " ".join(t if t in words else str(t == "gpu") for t in tokens)
    try:
        return bool(eval(python, {"__builtins__": {}}))  # only True, False, and, or, not, ()
    except SyntaxError:
        return False


def pytest_report_header(config):
    """The versions pip resolved for this run, first in every test log: CI installs the newest
    release of each dependency, so a break names the release that caused it."""
    versions = library_versions()
    return "resolved: " + ", ".join(f"{name} {version}" for name, version in versions.items())


def write_power_csv(
    path: Path, watts, period_s: float = 0.05, duration_s: float = 2.0, start_s: float | None = None
) -> Path:
    """A CSV of ``time_s, power_w``; ``watts`` is a number or a function of the time offset."""
    start = time.time() if start_s is None else start_s
    n = int(round(duration_s / period_s)) + 1
    with open(path, "w") as f:
        f.write("time_s,power_w\n")
        for i in range(n):
            t = i * period_s
            w = watts(t) if callable(watts) else watts
            f.write(f"{start + t!r},{w!r}\n")
    return path


@pytest.fixture
def power_csv(tmp_path):
    def make(watts=100.0, **kw):
        return write_power_csv(tmp_path / f"power-{len(list(tmp_path.glob('power-*')))}.csv", watts, **kw)

    return make


@pytest.fixture
def install_plugin(tmp_path, monkeypatch):
    """Register a plugin the way an installed package does: a module and a ``*.dist-info``
    folder with ``entry_points.txt`` on ``sys.path``. Returns the folder (for subprocesses)."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    registry.refresh()

    def install(
        group: str, name: str, module: str, source: str, attr: str, dist: str = "fake-plugin"
    ) -> Path:
        (root / f"{module}.py").write_text(textwrap.dedent(source))
        info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        eps = info / "entry_points.txt"
        previous = eps.read_text() if eps.exists() else ""
        eps.write_text(previous + f"[{group}]\n{name} = {module}:{attr}\n")
        sys.modules.pop(module, None)
        registry.refresh()
        return root

    yield install
    registry.refresh()


FAKE_NVML_DIR = Path(__file__).resolve().parent / "fake_nvml"
FAKE_BIN = Path(__file__).resolve().parent / "fake_bin"
H200 = "GPU-52dfc441-e9da-23f3-17f9-2b876aae0d10"


def gpu(uuid=H200, **kw):
    """One GPU of a fake NVML scenario."""
    return {"uuid": uuid, "name": "NVIDIA H200", "power_w": 700.0, **kw}


@pytest.fixture
def fake_nvml(tmp_path, monkeypatch):
    """Write a scenario and make ``import pynvml`` (here and in child processes) get the fake."""
    path = tmp_path / "nvml-scenario.json"
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_NVML_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.syspath_prepend(str(FAKE_NVML_DIR))
    real = sys.modules.pop("pynvml", None)

    def write(gpus=None, started_s_ago=0.0, **kw):
        scenario = {
            "t0_wall": time.time() - started_s_ago,
            "gpus": gpus if gpus is not None else [gpu()],
            **kw,
        }
        path.write_text(json.dumps(scenario))
        sys.modules.pop("pynvml", None)
        return scenario

    yield write
    sys.modules.pop("pynvml", None)
    if real is not None:
        sys.modules["pynvml"] = real


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Put the fake ``nvidia-smi`` first on PATH; the returned function writes its scenario."""
    path = tmp_path / "smi-scenario.json"
    monkeypatch.setenv("FAKE_SMI_SCENARIO", str(path))
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKE_BIN), os.environ["PATH"]]))

    def write(**scenario):
        path.write_text(json.dumps(scenario))

    write()
    return write
