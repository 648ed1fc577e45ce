"""Nsight Compute metrics for a sweep's configurations.

ncu profiles another process: ``python -m energyframe.sweeps.ncu`` reads a JSON list of launches
(source, kernel, grid, block, argument shapes and scalars), launches each once on random inputs,
and ncu, filtering on the kernels' names, records one row set per launch, in launch order. Run
with ``--clock-control none`` (the GPU's clocks as our measurement saw them) and
``--cache-control none`` (warm caches, as in our back-to-back graph replays).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .results import NCU_FIELDS

log = logging.getLogger("energyframe")

#: seconds per unit of ncu's time units
_TIME_UNITS = {
    "ns": 1e-9,
    "nsecond": 1e-9,
    "us": 1e-6,
    "usecond": 1e-6,
    "ms": 1e-3,
    "msecond": 1e-3,
    "s": 1.0,
    "second": 1.0,
}
_PERMISSION = ("ERR_NVGPUCTRPERM", "permission to access NVIDIA GPU Performance Counters")


class NcuUnavailable(Exception):
    """ncu is missing, not permitted, or failed: the sweep goes on without metrics."""


def command(spec_path: Path, kernel_names: Sequence[str], ncu: str = "ncu") -> list[str]:
    names = "|".join(re.escape(n) for n in sorted(set(kernel_names)))
    return [
        ncu,
        "--csv",
        "--print-units",
        "base",
        "--clock-control",
        "none",
        "--cache-control",
        "none",
        "--metrics",
        ",".join(NCU_FIELDS),
        "--kernel-name",
        f"regex:^({names})$",
        sys.executable,
        "-m",
        "energyframe.sweeps.ncu",
        str(spec_path),
    ]


def parse_csv(text: str) -> list[dict[str, Any]]:
    """ncu's ``--csv`` output (one row per metric) as one dict per profiled launch, in order:
    ``kernel`` (demangled name), ``id``, and our field names (durations in s)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("ID") is None or "Metric Name" not in row:
            continue
        launch = launches.setdefault(row["ID"], _launch(row))
        ours = NCU_FIELDS.get(row["Metric Name"])
        if ours is not None:
            launch[ours] = _metric_value(row, ours)
    return sorted(launches.values(), key=lambda launch: launch["id"])


def _launch(row: Mapping[str, str]) -> dict[str, Any]:
    """What identifies a profiled launch, from the first row of its metrics."""
    return {
        "id": int(row["ID"]),
        "kernel": row.get("Kernel Name", ""),
        "grid": row.get("Grid Size", ""),
        "block": row.get("Block Size", ""),
    }


def _metric_value(row: Mapping[str, str], ours: str) -> float:
    """A metric's value as a number (NaN where ncu wrote none); a duration in s.

    Raises:
        ValueError: a duration in a unit not in ``_TIME_UNITS``.
    """
    value = _number(row.get("Metric Value", ""))
    if ours == "ncu_duration_s":
        unit = (row.get("Metric Unit") or "ns").strip()
        if unit not in _TIME_UNITS:
            raise ValueError(f"ncu duration in unknown unit {unit!r}")
        value *= _TIME_UNITS[unit]
    return value


def _number(text: str) -> float:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return float("nan")


def profile(launches: Sequence[Mapping[str, Any]], timeout_s: float = 3600.0) -> list[dict[str, Any]]:
    """Metrics of each launch (same order), from one ncu process.

    Raises:
        NcuUnavailable: no ncu on PATH, no permission for the counters, or another failure;
            the message says which and what to do.
    """
    ncu = shutil.which("ncu")
    if ncu is None:
        raise NcuUnavailable("ncu (Nsight Compute) is not on PATH; the sweep continues without its metrics")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "launches.json"
        spec.write_text(json.dumps(list(launches)))
        cmd = command(spec, [launch["kernel"] for launch in launches], ncu)
        log.info("ncu: profiling %d launches", len(launches))
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy()
            )
        except subprocess.TimeoutExpired:
            raise NcuUnavailable(f"ncu did not finish in {timeout_s:g} s") from None
    output = done.stdout + "\n" + done.stderr
    if any(p in output for p in _PERMISSION):
        raise NcuUnavailable(
            "ncu has no permission for the GPU's performance counters (ERR_NVGPUCTRPERM): run as root "
            "or allow profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)"
        )
    rows = parse_csv(done.stdout)
    if done.returncode != 0 or len(rows) != len(launches):
        tail = "\n".join(output.strip().splitlines()[-8:])
        raise NcuUnavailable(
            f"ncu exited with {done.returncode} and profiled {len(rows)} of {len(launches)} launches:\n{tail}"
        )
    return rows


def _launch_all(spec_path: str) -> None:
    """The profiled process: each launch once, on random inputs, synchronised."""
    import torch

    from .check import allocate
    from .kernel import Launch, load_kernel
    from .runtime import kernel_args, launcher

    for item in json.loads(Path(spec_path).read_text()):
        kernel = load_kernel(
            item["source"],
            item["kernel"],
            options=item.get("options", ()),
            outputs=item.get("outputs", ()),
            inouts=item.get("inouts", ()),
        )
        launch = Launch(
            tuple(item["grid"]),
            tuple(item["block"]),
            item["shared_mem_bytes"],
            {k: tuple(v) for k, v in item["shapes"].items()},
            item["scalars"],
        )
        tensors = allocate(kernel, launch, {}, "cuda", seed=0)
        launcher(kernel, launch, kernel_args(kernel.signature, tensors, launch.scalars))()
        torch.cuda.synchronize()
        del tensors


if __name__ == "__main__":
    _launch_all(sys.argv[1])
