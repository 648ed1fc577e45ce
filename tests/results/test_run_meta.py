"""run.json typed: every earlier format reads (real files, tests/fixtures/run-json), a file of a
newer version is refused, unknown keys survive, and a wrong type is one line naming the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import StoreError
from energyframe.results.meta import FORMAT_VERSION, FormatVersionError, MetaError, RunMeta, migrate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "run-json"
EARLIER = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
SECTIONS = ("status", "reason", "pid", "clock", "sources", "primary_channels", "workload", "reporters", "config",
            "idle_baseline", "time_maps", "alignment", "rejected_samples", "derived", "timings_s", "fusion",
            "distributed", "phases", "notes", "warnings")


def test_there_is_a_fixture_of_every_earlier_shape():
    assert len(EARLIER) == 6 and all(json.loads((p / "run.json").read_text())["format_version"] == 1 for p in EARLIER)


@pytest.mark.parametrize("fixture", EARLIER, ids=[p.name for p in EARLIER])
def test_every_earlier_format_is_migrated_not_refused(fixture, tmp_path):
    raw = json.loads((fixture / "run.json").read_text())
    run = tmp_path / "run"
    shutil.copytree(fixture, run)
    result = ef.load_run(run)
    meta = result.run_meta
    assert meta.status == "complete" and meta.pid is None
    assert meta.clock is not None and meta.clock.model() is not None
    assert meta.workload is not None and meta.workload.name == "cpu-matmul"
    assert [s.name for s in meta.sources] == ["replay"] and meta.primary_channels == ("replay",)
    assert meta.idle_baseline["replay"].power_w == pytest.approx(raw["idle_baseline"]["replay"]["power_w"])
    (phase,) = result.summaries
    assert phase.energy_per_iter_j.median == pytest.approx(raw["phases"][0]["energy_per_iter_j"]["median"])
    assert phase.trials == 2 and len(result.windows) == 2
    written = meta.to_json()
    assert written["format_version"] == FORMAT_VERSION == 2
    assert all(key in written for key in SECTIONS)
    assert RunMeta.from_json(written) == meta  # read, written, read again: nothing lost
    shown = CliRunner().invoke(main, ["show", str(run)])
    assert shown.exit_code == 0 and "matmul-64" in shown.output, shown.output


def test_version_1_gets_every_section_and_the_pid_of_a_running_run():
    migrated = migrate({"format_version": 1, "status": "incomplete", "reason": "running (pid 4242); if this stays"})
    assert migrated["format_version"] == 2 and migrated["pid"] == 4242
    assert migrated["derived"] == [] and migrated["timings_s"] == {} and migrated["config"] == {}
    assert RunMeta.from_json(migrated).running_pid == 4242


@pytest.mark.parametrize(
    "version,message",
    [
        (3, "has run format version 3; this energyframe reads versions 1 to 2. Upgrade energyframe to read it."),
        (0, "has run format version 0, which no energyframe writes"),
        ("1", "has run format version '1', which no energyframe writes"),
        (None, "has run format version None, which no energyframe writes"),
    ],
)
def test_a_version_no_migration_reaches_is_refused(version, message):
    with pytest.raises(FormatVersionError) as error:
        RunMeta.from_json({"format_version": version})
    assert str(error.value) == message


def test_keys_this_version_does_not_know_are_kept():
    data = {"format_version": 2, "my_plugin": {"x": 1}, "sources": [{"name": "s", "later": True, "channels": []}]}
    meta = RunMeta.from_json(data)
    assert meta.extensions == {"my_plugin": {"x": 1}} and meta.sources[0].extra == {"later": True}
    written = meta.to_json()
    assert written["my_plugin"] == {"x": 1} and written["sources"][0]["later"] is True


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("status", 5, "'status' should be a string, not a number (5)"),
        ("reason", [], "'reason' should be a string or null, not a list"),
        ("pid", 1.5, "'pid' should be a whole number or null, not a number (1.5)"),
        ("clock", {"anchor_wall_s": "noon"}, "clock.anchor_wall_s should be a number or null, not a string (\"noon\")"),
        ("config", {"trials": "five"}, "config.trials should be a whole number or null, not a string (\"five\")"),
        ("timings_s", {"run": "long"}, "timings_s['run'] should be a number or null, not a string (\"long\")"),
        ("idle_baseline", {"gpu0": {"flags": "x"}}, "idle_baseline['gpu0'].flags should be a list, not a string (\"x\")"),
        ("distributed", {"world_size": 2, "ranks": [{"rank": "0"}]},
         "distributed.ranks[0].rank should be a whole number, not a string (\"0\")"),
        ("workload", {"name": 3}, "workload.name should be a string, not a number (3)"),
        ("derived", [{"rows": []}], "derived[0] should be an object with a name and a list of rows, not an object"),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_file_and_the_key(tmp_path, field, value, message):
    with pytest.raises(MetaError) as error:
        RunMeta.from_json({"format_version": 2, field: value})
    assert str(error.value) == message
    (tmp_path / "run.json").write_text(json.dumps({"format_version": 2, field: value}))
    with pytest.raises(StoreError) as stored:
        ef.load_run(tmp_path)
    assert str(stored.value) == f"{tmp_path}/run.json: {message}; the file is damaged (energyframe writes it whole)"


def test_a_run_writes_the_current_format_with_every_section_and_its_pid(tmp_path):
    import os

    ef.run("sleep:seconds=0.01", power="none", reporters=[], out=tmp_path / "r",
           settings=ef.RunSettings(trials=1, min_window_s=0.01, warmup_s=0.0))
    written = json.loads((tmp_path / "r" / "run.json").read_text())
    assert written["format_version"] == 2 and written["pid"] == os.getpid()
    assert all(key in written for key in SECTIONS)
