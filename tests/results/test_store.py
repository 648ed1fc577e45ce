"""The run directory: atomic files, format versions, crash recovery."""

import json

import pandas as pd
import pytest

from energyframe.core.samples import PARTIAL_NAME
from energyframe.errors import StoreError
from energyframe.results import store
from energyframe.results.result import RunResult


def test_atomic_write_leaves_no_partial_file_on_failure(tmp_path):
    target = tmp_path / "x.json"
    target.write_text('{"old": true}')

    def explode(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        store._atomic_write(target, explode)
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_json_has_no_nan(tmp_path):
    store.write_json(tmp_path / "a.json", {"x": float("nan"), "y": [1.0, float("inf")], "p": tmp_path})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": None, "y": [1.0, None], "p": str(tmp_path)}


def test_default_run_dir_is_unique(tmp_path):
    first = store.default_run_dir("resnet50:batch=64", root=tmp_path)
    first.mkdir()
    second = store.default_run_dir("resnet50:batch=64", root=tmp_path)
    assert first.parent == tmp_path and first != second
    assert first.name.endswith("Z-resnet50_batch_64")


def test_partial_samples_with_a_torn_last_line_are_recovered(tmp_path):
    (tmp_path / "run.json").write_text(
        json.dumps({"format_version": 1, "status": "incomplete", "reason": "running"})
    )
    (tmp_path / PARTIAL_NAME).write_text(
        "source,channel,time_s,value,unit\nnvml,gpu0,1.5,10.0,J\nnvml,gpu0,1.6,20.0,J\nnvml,gpu0,1.7"
    )
    result = RunResult.load(tmp_path)
    assert list(result.samples["value"]) == [10.0, 20.0]
    assert result.meta["samples_origin"] == PARTIAL_NAME
    assert result.windows.empty and result.summaries == ()


def test_windows_csv_round_trip_keeps_empty_text_and_exact_floats(tmp_path):
    frame = pd.DataFrame(
        {
            "phase": ["a"],
            "trial": [0],
            "channel": [""],
            "start_s": [1795317182.603125],
            "end_s": [1795317183.603125],
            "iterations": [1],
            "time_per_iter_s": [1.0],
            "energy_j": [float("nan")],
            "mean_power_w": [float("nan")],
            "energy_per_iter_j": [float("nan")],
            "dynamic_energy_per_iter_j": [float("nan")],
            "flags": [""],
        }
    )
    store.write_csv(tmp_path / store.WINDOWS_CSV, frame)
    back = store.read_windows(tmp_path)
    assert back.loc[0, "channel"] == "" and back.loc[0, "flags"] == ""
    assert back.loc[0, "start_s"] == 1795317182.603125
    assert pd.isna(back.loc[0, "energy_j"])


def test_invalid_json_is_a_store_error(tmp_path):
    (tmp_path / "run.json").write_text("{")
    with pytest.raises(StoreError, match="run.json is not valid JSON"):
        RunResult.load(tmp_path)


def test_a_header_only_windows_csv_is_a_run_without_windows(tmp_path):
    """An interrupted run that finished no window writes the header alone: not damage."""
    from energyframe.core.windows import WINDOW_COLUMNS

    (tmp_path / store.WINDOWS_CSV).write_text(",".join(WINDOW_COLUMNS) + "\n")
    frame = store.read_windows(tmp_path)
    assert frame.empty and list(frame.columns) == WINDOW_COLUMNS


def test_text_in_a_numeric_column_of_windows_csv_is_a_store_error(tmp_path):
    (tmp_path / store.WINDOWS_CSV).write_text("phase,trial,start_s\na,0,1.5\nb,1,soon\n")
    with pytest.raises(StoreError) as e:
        store.read_windows(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / store.WINDOWS_CSV} has text in its numeric column start_s (row 3: 'soon'): the file is "
        "damaged; restore it, or delete it to see the run from run.json alone"
    )
