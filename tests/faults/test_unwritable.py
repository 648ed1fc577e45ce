"""Places the system will not let a command write: a read-only folder for `new-plugin`, a disk
that is full before the first sample is journaled. One line naming the place, no traceback,
nothing half-written left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from tests.conftest import write_power_csv


def _read_only_folder(tmp_path: Path) -> Path:
    """A read-only tmpfs (root only), else a folder whose files the system refuses to make:
    under /sys nobody may create one (EPERM as root, EACCES otherwise)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True)
        if mounted.returncode == 0:
            return folder
    return Path("/sys/energyframe-test-no-such-folder")


def test_new_plugin_into_a_read_only_folder_is_one_line(tmp_path):
    folder = _read_only_folder(tmp_path)
    try:
        r = CliRunner().invoke(main, ["new-plugin", "probe", "--kind", "power", "--out", str(folder)])
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"Error: cannot write the package into {folder}: ")
    assert r.output.endswith(" (choose a writable --out)\n") and r.output.count("\n") == 1
    assert not (folder / "energyframe-probe").exists()


def test_new_plugin_under_a_file_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    r = CliRunner().invoke(main, ["new-plugin", "probe", "--kind", "power", "--out", str(tmp_path / "a-file" / "sub")])
    assert r.exit_code == 2
    assert r.output == (
        f"Error: cannot write the package into {tmp_path / 'a-file' / 'sub'}: Not a directory (choose a writable --out)\n"
    )


def _full_from_the_start(tmp_path: Path) -> Path:
    """A run directory whose samples journal can hold no byte: ``samples.partial.csv`` is a link
    to ``/dev/full`` (every write: ENOSPC), as on a disk with no block left."""
    out = tmp_path / "full"
    out.mkdir()
    (out / "samples.partial.csv").symlink_to("/dev/full")
    return out


def test_a_disk_full_before_the_first_sample_is_one_line_from_the_command_line(tmp_path):
    power = write_power_csv(tmp_path / "p.csv", 100.0, duration_s=30)
    out = _full_from_the_start(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "energyframe", "run", "--power", f"replay:file={power}", "--workload",
         "sleep:seconds=0.1", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stderr
    # the run directory (or, once the samples' store names it, its samples journal)
    assert done.stderr in (
        f"Error: cannot write {out}: no space left on the device\n",
        f"Error: cannot write {out / 'samples.partial.csv'}: no space left on the device\n",
    ), done.stderr
    assert not (out / "run.json").exists()  # nothing was measured: the claim was taken back


def test_a_disk_full_before_the_first_sample_is_a_store_error_from_the_api(tmp_path):
    power = write_power_csv(tmp_path / "p.csv", 100.0, duration_s=30)
    out = _full_from_the_start(tmp_path)
    with pytest.raises(ef.StoreError, match=r"^cannot write .*samples\.partial\.csv: no space left on the device"):
        ef.run("sleep:seconds=0.1", power=[f"replay:file={power}"], reporters=[], out=out)
