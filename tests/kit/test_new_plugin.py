"""``energyframe new-plugin``: a package with its module, entry point and tests that pass as written."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from energyframe.cli import main

ROOT = Path(__file__).resolve().parents[2]


def new_plugin(*args):
    return CliRunner().invoke(main, ["new-plugin", *args])


def test_it_writes_a_package_with_its_entry_point(tmp_path):
    result = new_plugin("hwmon-gpu", "--kind", "power", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    folder = tmp_path / "energyframe-hwmon-gpu"
    assert result.output.splitlines() == [
        f"wrote {folder}:",
        "  pyproject.toml",
        "  README.md",
        "  energyframe_hwmon_gpu.py",
        "  tests/conftest.py",
        "  tests/test_energyframe_hwmon_gpu.py",
        f"next: pip install -e {folder} && python -m pytest {folder / 'tests'}; `energyframe list` shows hwmon-gpu",
    ]
    pyproject = (folder / "pyproject.toml").read_text()
    assert '[project.entry-points."energyframe.power"]\nhwmon-gpu = "energyframe_hwmon_gpu:HwmonGpuPowerSource"' in pyproject
    assert 'name = "energyframe-hwmon-gpu"' in pyproject


@pytest.mark.parametrize("kind", ["power", "workload", "reporter"])
def test_the_code_imports_only_the_plugin_api_and_the_kit(tmp_path, kind):
    assert new_plugin(f"my-{kind}", "--kind", kind, "--out", str(tmp_path)).exit_code == 0
    folder = tmp_path / f"energyframe-my-{kind}"
    for path, allowed in [(folder / f"energyframe_my_{kind}.py", {"energyframe.plugin"}),
                          (folder / "tests" / f"test_energyframe_my_{kind}.py", {"energyframe.plugin", "energyframe.testing"})]:
        tree = ast.parse(path.read_text())
        used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert {m for m in used if m.split(".")[0] == "energyframe"} <= allowed


@pytest.mark.parametrize(
    "args,message",
    [
        (["Hwmon_GPU", "--kind", "power"], "Error: plugin name 'Hwmon_GPU' is not one users can type: use lower-case "
         "letters and digits, words joined by '-' (e.g. hwmon-gpu)"),
        (["x", "--kind", "power", "--out", ""], "Error: --out is empty; give a folder for the package"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, message):
    result = new_plugin(*args)
    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_an_existing_folder_is_never_overwritten(tmp_path):
    (tmp_path / "energyframe-meter").mkdir()
    result = new_plugin("meter", "--kind", "power", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {tmp_path / 'energyframe-meter'} already exists: choose another name or --out"
    assert list((tmp_path / "energyframe-meter").iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["power", "workload", "reporter"])
def test_the_generated_tests_pass(tmp_path, kind):
    assert new_plugin(f"my-{kind}", "--kind", kind, "--out", str(tmp_path)).exit_code == 0
    folder = tmp_path / f"energyframe-my-{kind}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=folder,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in run.stdout and "skipped" not in run.stdout


@pytest.mark.slow
def test_a_real_pip_install_registers_the_entry_point(tmp_path):
    assert new_plugin("tiny-work", "--kind", "workload", "--out", str(tmp_path)).exit_code == 0
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(tmp_path / "energyframe-tiny-work")],
                   check=True, capture_output=True, text=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    listing = subprocess.run([sys.executable, "-m", "energyframe", "list", "workloads"], capture_output=True,
                             text=True, env=env, check=True).stdout
    assert "tiny-work  [energyframe-tiny-work 0.1.0]  sums of squares in pure Python, one phase per size" in listing
