"""The rapl source on a fake powercap tree: the plugin kit's conformance checks and accuracy harness,
wraps and resets, errors, and a real pip install of the package."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import energyframe_rapl
import numpy as np
import pytest
from energyframe_rapl import RAPLPowerSource

import energyframe
import energyframe as ef
from energyframe.plugin import PowerSourceError, Quantity, Scope, SourceContext
from energyframe.testing import check_accuracy, check_power_source, steps

PLUGIN_DIR = Path(__file__).resolve().parents[1]


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def make_zone(root: Path, dirname: str, name: str, energy_uj: int = 0, max_uj: int = 262143328850) -> Path:
    zone = root / dirname
    zone.mkdir(parents=True)
    (zone / "name").write_text(name + "\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (zone / "enabled").write_text("1\n")
    return zone


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "powercap"
    make_zone(root, "intel-rapl:0", "package-0")
    make_zone(root, "intel-rapl:0:0", "core")
    make_zone(root, "intel-rapl:0:1", "dram")
    make_zone(root, "intel-rapl:1", "package-1")
    make_zone(root, "intel-rapl:1:0", "dram")
    (root / "intel-rapl").mkdir()  # the control type folder, not a zone
    return root


class Burner:
    """Advances zones' counters at ``watts`` every ``update_s``, on schedule, wrapping at ``max_uj``
    like the hardware (a fake CPU whose counters update every ``update_s``)."""

    def __init__(self, zones, watts: float, max_uj: int = 262143328850, update_s: float = 0.02):
        self.zones, self.watts, self.max_uj, self.update_s = list(zones), watts, max_uj, update_s
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        due_s = time.monotonic()
        while not self._stop.wait(max(0.0, due_s - time.monotonic())):
            # the start read once per update: a test that resets it (moves ``_t0``) between the
            # update and the next wait must not pair the new start with the old update's count
            # (a wait of the whole time since the old start: the counter would stop)
            t0 = self._t0
            k = int((time.monotonic() - t0) / self.update_s) + 1
            uj = int(self.watts * (k - 1) * self.update_s * 1e6) % self.max_uj
            for zone in self.zones:
                write_atomic(zone / "energy_uj", f"{uj}\n")
            due_s = t0 + k * self.update_s

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def zones_of(tree: Path) -> list[Path]:
    return sorted(p for p in tree.iterdir() if (p / "energy_uj").exists())


#: counters that update every 20 ms (the fake's), read every 4 ms: slow enough for a loaded test machine
FAKE = {"update_ms": 20.0, "interval_ms": 4.0}


def test_channels_follow_the_zones(tree):
    source = RAPLPowerSource(name="rapl", root=tree)
    channels = {c.name: c for c in source.start(SourceContext())}
    source.stop()
    assert list(channels) == ["cpu0", "cpu0.core", "cpu0.dram", "cpu1", "cpu1.dram"]
    assert all(c.quantity == Quantity.ENERGY for c in channels.values())
    assert channels["cpu0"].scope == Scope.CPU and channels["cpu0"].primary
    assert channels["cpu0.dram"].scope == Scope.DRAM and channels["cpu0.dram"].primary
    assert not channels["cpu0.core"].primary  # part of the package: not added twice in tables
    # the counters' update period, not the polling period (0.5 ms)
    assert channels["cpu0"].resolution_s == pytest.approx(0.001)


def test_polling_no_faster_than_the_counters_update_is_refused(tree):
    with pytest.raises(PowerSourceError) as e:
        RAPLPowerSource(name="rapl", root=tree, interval_ms=1.0, mode="thread").start(SourceContext())
    assert str(e.value) == (
        "interval_ms=1 does not poll faster than the counters update (update_ms=1): their ticks would alias; "
        "give a smaller interval_ms"
    )


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_source_keeps_the_plugin_contract(tree, mode):
    with Burner(zones_of(tree), 40.0):
        samples = check_power_source(RAPLPowerSource, {"root": tree, "mode": mode, **FAKE}, run_s=1.0)
    ticks = [s.time_s for s in samples["cpu0"]]
    assert 25 < len(ticks) < 60  # one sample per counter update (50 in 1 s), not per poll (250)


def test_window_energy_against_a_known_load(tree):
    zones = zones_of(tree)

    def drive(truth):  # every zone of the fake tree shows the energy of the known load
        for zone in zones:
            write_atomic(zone / "energy_uj", f"{int(truth.energy_j * 1e6)}\n")

    # the tolerance this package claims for 1-s windows of counters that update every 20 ms: a step
    # inside the tick around an edge moves up to 0.4 J (of 40 J) at each edge
    report = check_accuracy(RAPLPowerSource, {"root": tree, "mode": "thread", **FAKE}, drive,
                            steps((20.0, 60.0), 0.35), tolerance=0.03, update_s=0.02, duration_s=4.0,
                            window_s=1.0)
    assert {w.channel for w in report.windows} == {"cpu0", "cpu0.dram", "cpu1", "cpu1.dram"}
    assert abs(report.mean_error) < 0.01


def test_window_energy_across_counter_wraps(tree):
    max_uj = 5_000_000  # 5 J: at 40 W the counter wraps every 125 ms
    zone = tree / "intel-rapl:0"
    write_atomic(zone / "max_energy_range_uj", f"{max_uj}\n")
    source = RAPLPowerSource(name="rapl", root=tree, zones="package-0", **FAKE)
    with Burner([zone], 40.0, max_uj):
        with ef.measure(power=[source]) as m:
            for _ in range(3):
                with m.window("busy"):
                    time.sleep(0.6)
    w = m.result.windows
    assert len(w) == 3
    # ~5 wraps per window: one missed wrap would lose 5 J of the window's 24 J (21 %); the 10 %
    # leaves room for the burner thread writing late on a loaded machine
    assert w["mean_power_w"].to_numpy() == pytest.approx(40.0, rel=0.1)
    assert (w["energy_j"] > 0).all()
    info = m.result.meta["sources"][0]["info"]["zones"]["cpu0"]
    assert info["wraps"] >= 10 and info["resets"] == 0


def test_a_counter_reset_is_flagged_not_counted_as_a_wrap(tree):
    # 100 W; then the driver reloads and the counter restarts from 0, far below where it was: read
    # as a wrap, the window would hold 262 kJ (issue: 85.7 kW at a true 100 W)
    zone = tree / "intel-rapl:0"
    source = RAPLPowerSource(name="rapl", root=tree, zones="package-0", mode="thread", **FAKE)
    burner = Burner([zone], 100.0)
    burner._t0 -= 1500.0  # 150 kJ since boot
    with burner:
        with ef.measure(power=[source]) as m:
            with m.window("before"):
                time.sleep(0.3)
            with m.window("across"):
                time.sleep(0.15)
                burner._t0 = time.monotonic()  # the reset
                time.sleep(0.15)
            with m.window("after"):
                time.sleep(0.3)
    w = m.result.windows.set_index("phase")
    assert w.loc["before", "mean_power_w"] == pytest.approx(100.0, rel=0.1)
    assert np.isnan(w.loc["across", "energy_j"]) and "counter_reset" in w.loc["across", "flags"]
    assert w.loc["after", "mean_power_w"] == pytest.approx(100.0, rel=0.1)
    assert any("RAPL counter of intel-rapl:0 (package-0) was reset" in x for x in m.result.warnings)
    assert m.result.meta["sources"][0]["info"]["zones"]["cpu0"]["resets"] == 1


def test_unreadable_counter_says_how_to_fix_it(tree, monkeypatch):
    real = Path.read_text

    def deny(self, *a, **kw):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(PowerSourceError) as e:
        RAPLPowerSource(name="rapl", root=tree, mode="thread").start(SourceContext())
    assert str(e.value) == (
        f"cannot read {tree}/intel-rapl:0/energy_uj: permission denied; since Linux 5.10 the RAPL "
        f"counters are readable by root only; run as root, or grant read access with: "
        f"sudo chmod o+r {tree}/intel-rapl:*/energy_uj"
    )


def test_counter_vanishing_mid_run_fails_the_source(tree):
    source = RAPLPowerSource(name="rapl", root=tree, zones="package-0")
    source.start(SourceContext())
    (tree / "intel-rapl:0" / "energy_uj").unlink()
    time.sleep(0.1)
    with pytest.raises(PowerSourceError, match="cannot read .*energy_uj"):
        while True:
            if not source.read():
                time.sleep(0.02)
    source.stop()


def test_no_zones(tmp_path):
    with pytest.raises(PowerSourceError, match=f"no RAPL zones under {tmp_path}"):
        RAPLPowerSource(name="rapl", root=tmp_path).start(SourceContext())


def test_detect_uses_the_system_tree(tree, monkeypatch):
    monkeypatch.setattr(energyframe_rapl, "DEFAULT_ROOT", tree)
    found = RAPLPowerSource.detect()
    assert found.available and found.reason == "5 RAPL zone(s)"
    monkeypatch.setattr(energyframe_rapl, "DEFAULT_ROOT", tree / "missing")
    assert not RAPLPowerSource.detect().available


def _listing(env):
    return subprocess.run(
        [sys.executable, "-S", "-m", "energyframe", "list", "power"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout


def _is_the_plugin(name: str) -> bool:
    """A site-packages entry of an installed energyframe-rapl (module, metadata, editable hooks)."""
    stem = name.lower().replace("-", "_").lstrip("_").removeprefix("editable__").lstrip("_")
    return stem.startswith("energyframe_rapl")


def environment_without_the_plugin(root: Path) -> list[str]:
    """This interpreter's import path with energyframe-rapl taken out, wherever it is installed
    (``pip install ./plugins/energyframe-rapl`` puts it beside energyframe): a folder holding it is
    replaced by a folder of links to everything else in it. For ``python -S``, which reads no
    ``.pth`` file, so an editable install of the plugin cannot come back either."""
    # energyframe's own folder too: an editable install may import it through a finder, not sys.path
    entries = [p for p in sys.path if p] + [str(Path(energyframe.__file__).resolve().parents[1])]
    paths = []
    for i, entry in enumerate(dict.fromkeys(p for p in entries if Path(p).is_dir())):
        folder = Path(entry).resolve()
        if folder == PLUGIN_DIR:  # this test folder's conftest puts the source on sys.path
            continue
        names = [child.name for child in folder.iterdir()]
        if any(_is_the_plugin(n) for n in names):
            shadow = root / f"shadow-{i}"
            shadow.mkdir(parents=True)
            for name in names:
                if not _is_the_plugin(name):
                    (shadow / name).symlink_to(folder / name)
            folder = shadow
        paths.append(str(folder))
    return paths


@pytest.mark.slow
def test_a_real_pip_install_makes_it_appear_in_energyframe_list(tmp_path):
    # a process that sees this environment without the plugin, installed or not (its README says
    # pip install ./plugins/energyframe-rapl): energyframe, its dependencies and any editable
    # install of energyframe itself come from the same folders, through sys.path
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(environment_without_the_plugin(tmp_path / "env"))
    assert "rapl" not in _listing(env).split()
    # build from a copy: a build leaves egg-info in the source folder
    source = tmp_path / "energyframe-rapl"
    shutil.copytree(
        PLUGIN_DIR, source, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", "build")
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    env["PYTHONPATH"] = os.pathsep.join([str(target), env["PYTHONPATH"]])
    listing = _listing(env)
    assert "rapl  [energyframe-rapl 0.1.0]  CPU package and DRAM energy from Linux powercap (RAPL)" in listing
    assert "interval_ms (float, default 0.5): polling period, shorter than update_ms. Units: ms" in listing
    assert (
        str(target)
        in subprocess.run(
            [sys.executable, "-S", "-c", "import energyframe_rapl; print(energyframe_rapl.__file__)"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
    )  # the plugin listed is the one just installed


def test_the_plugin_imports_only_the_stable_plugin_api():
    import ast

    tree = ast.parse((PLUGIN_DIR / "energyframe_rapl.py").read_text())
    used = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    used |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    ours = {m for m in used if m.split(".")[0] == "energyframe"}
    assert ours == {"energyframe.plugin"}
