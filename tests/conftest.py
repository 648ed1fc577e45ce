"""Shared fixtures: power profiles for the replay source, and real plugin installation."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from energyframe import registry


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
