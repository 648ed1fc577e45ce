"""``wandb`` offline: read back from the offline run's own file (its records: config, history,
summary, artifact): a row per window, a summary value per phase, the run directory's files."""

import json
import struct
import time

import pandas as pd
import pytest

from energyframe.errors import UsageError
from energyframe.kit import registry

pytest.importorskip("wandb")
from google.protobuf.message import DecodeError  # noqa: E402
from wandb.proto import wandb_internal_pb2  # noqa: E402

pytestmark = pytest.mark.slow  # W&B starts its service process

#: the offline file: a 7-byte header, then 32 KiB blocks of records, each with a 7-byte header
#: (checksum, length, type: full, first, middle, last), as W&B's leveldb-style log writes them
HEADER, BLOCK, RECORD_HEADER = 7, 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path):
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = HEADER, b""
    while pos + RECORD_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < RECORD_HEADER:  # the block's tail is padding
            pos += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + RECORD_HEADER])
        body = data[pos + RECORD_HEADER : pos + RECORD_HEADER + length]
        if len(body) < length:  # still being written
            return
        pos += RECORD_HEADER + length
        if kind == 0 and length == 0:
            continue
        pending = body if kind in (FULL, FIRST) else pending + body
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def read_offline(folder, within_s=60.0):
    """The offline run's history rows, summary, config and artifacts. W&B's service process
    writes the file on its own after ``finish`` returns: read until its exit record is there
    (``within_s`` bounds only a failure)."""
    deadline = time.monotonic() + within_s
    while True:
        (path,) = folder.glob("wandb/offline-run-*/run-*.wandb")
        try:
            found = list(records(path))
        except DecodeError:  # a record read while it was being written
            found = []
        if any(r.WhichOneof("record_type") == "exit" for r in found) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    history, summary, config, artifacts = [], {}, {}, []
    for r in found:
        kind = r.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item})
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.summary.update})
        elif kind in ("config", "run"):
            update = r.config.update if kind == "config" else r.run.config.update
            config.update({item.key: json.loads(item.value_json) for item in update})
        elif kind == "artifact":
            artifacts.append(r.artifact)
    return history, summary, config, artifacts


def test_offline_run_has_windows_summary_config_and_artifact(saved_run, monkeypatch):
    monkeypatch.delenv("WANDB_DIR", raising=False)
    result, run_dir = saved_run
    registry.create(registry.REPORTERS, "wandb:mode=offline,project=ef-test").report(result, run_dir)
    history, summary, config, artifacts = read_offline(run_dir)
    w = pd.read_csv(run_dir / "windows.csv").sort_values("start_s")
    assert [row["window/trial"] for row in history] == list(w["trial"])
    energies = [row.get("window/train-step/replay/energy_j") for row in history]
    steps = w[w["phase"] == "train-step"]
    assert [e for e in energies if e is not None] == pytest.approx(list(steps["energy_j"]), rel=1e-12)
    median = result.summary("train-step").energy_per_iter_j.median
    assert summary["train-step/replay/energy_per_iter_j"] == pytest.approx(median)
    assert config["power"] == "replay" and config["status"] == "complete"
    (artifact,) = artifacts
    assert artifact.type == "energyframe-run" and artifact.name == f"energyframe-{run_dir.name}"
    paths = {entry.path for entry in artifact.manifest.contents}
    assert paths == {"run.json", "windows.csv", "samples.parquet"}  # not W&B's own files beside them


def test_without_wandb_the_reporter_is_refused_before_the_run(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)
    with pytest.raises(UsageError, match=r"^reporter 'wandb' needs wandb: pip install 'energyframe\[integrations\]'$"):
        registry.create(registry.REPORTERS, "wandb")


def test_the_reporter_contract(monkeypatch):
    from energyframe.reporters.wandb import WandbReporter
    from energyframe.testing import check_reporter

    monkeypatch.delenv("WANDB_DIR", raising=False)
    check_reporter(WandbReporter, {"mode": "offline"})  # every kind of result, nothing in the cwd
