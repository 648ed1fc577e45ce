"""The rapl source on a fake powercap tree, and a real pip install of the package."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import energyframe_rapl
import pytest
from energyframe_rapl import RAPLPowerSource

import energyframe
import energyframe as ef
from energyframe.errors import PowerSourceError
from energyframe.plugin import Quantity, Scope, SourceContext

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
    """Advances a zone's counter at ``watts``, wrapping at ``max_uj`` like the hardware."""

    def __init__(self, zone: Path, watts: float, max_uj: int):
        self.zone, self.watts, self.max_uj = zone, watts, max_uj
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(0.002):
            uj = int(self.watts * (time.monotonic() - self._t0) * 1e6) % self.max_uj
            write_atomic(self.zone / "energy_uj", f"{uj}\n")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_channels_follow_the_zones(tree):
    source = RAPLPowerSource(name="rapl", root=tree)
    channels = {c.name: c for c in source.start(SourceContext())}
    source.stop()
    assert list(channels) == ["cpu0", "cpu0.core", "cpu0.dram", "cpu1", "cpu1.dram"]
    assert all(c.quantity == Quantity.ENERGY for c in channels.values())
    assert channels["cpu0"].scope == Scope.CPU and channels["cpu0"].primary
    assert channels["cpu0.dram"].scope == Scope.DRAM and channels["cpu0.dram"].primary
    assert not channels["cpu0.core"].primary  # part of the package: not added twice in tables
    assert channels["cpu0"].resolution_s == pytest.approx(0.01)


def test_zone_filter(tree):
    source = RAPLPowerSource(name="rapl", root=tree, zones="package-0,package-1")
    assert [c.name for c in source.start(SourceContext())] == ["cpu0", "cpu1"]
    source.stop()
    with pytest.raises(
        PowerSourceError, match="no RAPL zone named 'gpu'; zones here: core, dram, package-0, package-1"
    ):
        RAPLPowerSource(name="rapl", root=tree, zones="gpu").start(SourceContext())


def test_window_energy_across_counter_wraps(tree):
    max_uj = 5_000_000  # 5 J: at 40 W the counter wraps every 125 ms
    zone = tree / "intel-rapl:0"
    write_atomic(zone / "max_energy_range_uj", f"{max_uj}\n")
    source = RAPLPowerSource(name="rapl", root=tree, zones="package-0", interval_ms=5)
    with Burner(zone, 40.0, max_uj):
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
    assert m.result.meta["sources"][0]["info"]["zones"]["cpu0"]["wraps"] >= 10


def test_unreadable_counter_says_how_to_fix_it(tree, monkeypatch):
    real = Path.read_text

    def deny(self, *a, **kw):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(PowerSourceError) as e:
        RAPLPowerSource(name="rapl", root=tree).start(SourceContext())
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
    assert "interval_ms (float, default 10): polling period. Units: ms" in listing
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
