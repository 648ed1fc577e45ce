"""Bad values on the command line: each refused before anything starts, in one line that names
the value and what is valid, exit 2, no traceback, nothing written; values that would hang a
command (a shard count of 10**12, 100 000 emulated meters) are refused just as fast.

Each case runs the real command line (click's CliRunner) from a scratch directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

import energyframe as ef
from tests.fakes import invoke_within

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SHARD_0 = FIXTURES / "sweep" / "shard-0-of-2.json"
SHARD_1 = FIXTURES / "sweep" / "shard-1-of-2.json"
BUG_CU = FIXTURES / "cuda" / "planted_bug.cu"
#: a refusal that takes longer than this is a hang. Units: s.
HANG_S = 60


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A small timing-only run for the commands that read one."""
    out = tmp_path_factory.mktemp("saved") / "run"
    ef.run("sleep:seconds=0.01", power="none", reporters=[], out=out, settings=ef.RunSettings(trials=3, warmup_s=0.0))
    return out


def shard_with(claim) -> object:
    """A copy of the first shard of the fixture sweep claiming ``claim`` as its shard."""

    def make(tmp: Path) -> Path:
        data = json.loads(SHARD_0.read_text())
        data["sweep"]["shard"] = claim
        path = tmp / "crafted.json"
        path.write_text(json.dumps(data))
        return path

    return make


@dataclass(frozen=True)
class Case:
    """``argv`` (``{run}``: the saved run, ``{tmp}``: a scratch folder, ``{crafted}``: a
    crafted file) and the one error line it must print."""

    id: str
    argv: tuple[str, ...]
    error: str
    code: int = 2
    crafted: object = None


LONG_NAME = "a" * 300
LONG_PATH = "/tmp/" + "/".join(["d"] * 2100)  # 4204 bytes
RANGE = "must be a finite number in the range"

CASES = [
    # numbers that compare false with every bound
    Case("dist-timeout-nan", ("run", "--power", "none", "--workload", "sleep", "--dist-timeout", "nan"),
         f"Error: Invalid value for '--dist-timeout': {RANGE} 0<x<=86400, got nan"),
    Case("grid-intensity-nan", ("run", "--power", "none", "--workload", "sleep", "--grid-intensity", "nan"),
         f"Error: Invalid value for '--grid-intensity': {RANGE} 0<=x<=5000, got nan"),
    Case("show-grid-intensity-inf", ("show", "{run}", "--grid-intensity", "inf"),
         f"Error: Invalid value for '--grid-intensity': {RANGE} 0<=x<=5000, got inf"),
    Case("compare-alpha-nan", ("compare", "{run}", "{run}", "--alpha", "nan"),
         f"Error: Invalid value for '--alpha': {RANGE} 0<x<1, got nan"),
    Case("compare-min-change-inf", ("compare", "{run}", "{run}", "--min-change", "inf"),
         f"Error: Invalid value for '--min-change': {RANGE} x>=0, got inf"),
    Case("report-alpha-nan", ("report", "{run}", "{run}", "--alpha", "nan", "--out", "{tmp}/r.html"),
         f"Error: Invalid value for '--alpha': {RANGE} 0<x<1, got nan"),
    # monitor: a redraw every NaN seconds was a traceback, a NaN duration an exit 0 at once, an
    # infinite one accepted
    Case("monitor-refresh-nan", ("monitor", "--power", "replay:file=x.csv", "--refresh", "nan"),
         f"Error: Invalid value for '--refresh': {RANGE} 0.1<=x<=3600, got nan"),
    Case("monitor-duration-nan", ("monitor", "--power", "replay:file=x.csv", "--duration", "nan"),
         f"Error: Invalid value for '--duration': {RANGE} 0<x<=604800, got nan"),
    Case("monitor-duration-inf", ("monitor", "--power", "replay:file=x.csv", "--duration", "inf"),
         f"Error: Invalid value for '--duration': {RANGE} 0<x<=604800, got inf"),
    # a setting that only a --precision run reads, given without one, was silently ignored
    Case("max-time-without-precision", ("run", "--power", "none", "--workload", "sleep", "--max-time", "5"),
         "Error: --max-time bounds a --precision run (the most seconds of windows per phase); without --precision "
         "each phase measures --trials windows: add --precision P, or leave --max-time out"),
    # a list option given with no item
    Case("cpu-matmul-no-size", ("run", "--power", "none", "--workload", "cpu-matmul:sizes=,,", "--out", "{tmp}/r"),
         "Error: option 'sizes' of workload 'cpu-matmul' needs at least 1 value (comma-separated integers), "
         "got ',,'"),
    # paths the system cannot hold
    Case("out-long-name", ("run", "--power", "none", "--workload", "sleep", "--out", LONG_NAME),
         f"Error: Invalid value for '--out': '{'a' * 40}...{'a' * 12}' is too long: a name in it is 300 bytes "
         "long; the file system takes at most 255"),
    Case("out-long-path", ("run", "--power", "none", "--workload", "sleep", "--out", LONG_PATH),
         f"Error: Invalid value for '--out': '{LONG_PATH[:40]}...{LONG_PATH[-12:]}' is too long: the path is "
         "4204 bytes long; the system takes at most 4095"),
    Case("report-out-long-name", ("report", "{run}", "--out", LONG_NAME + ".html"),
         f"Error: Invalid value for '--out': '{'a' * 40}...{'a' * 7}.html' is too long: a name in it is 305 "
         "bytes long; the file system takes at most 255"),
    Case("merge-out-long-name", ("merge", str(SHARD_0), str(SHARD_1), "--out", LONG_NAME),
         f"Error: cannot use '{'a' * 40}...{'a' * 12}': File name too long (a name over 255 bytes or a path "
         "over 4095)"),
    Case("plot-out-txt", ("plot", "{run}", "--out", "{tmp}/x.txt"),
         "Error: cannot draw the plot as x.txt: '.txt' is not an image format; use one of .avif, .eps, .gif, "
         ".jpeg, .jpg, .pdf, .pgf, .png, .ps, .raw, .rgba, .svg, .svgz, .tif, .tiff, .webp"),
    # the WattsUp emulator
    Case("emulator-constant-nan", ("wattsup-emulator", "--profile", "constant:nan"),
         "Error: bad profile 'constant:nan': the power must be a finite number of watts >= 0, got 'nan'"),
    Case("emulator-constant-inf", ("wattsup-emulator", "--profile", "constant:inf"),
         "Error: bad profile 'constant:inf': the power must be a finite number of watts >= 0, got 'inf'"),
    Case("emulator-square-period-0", ("wattsup-emulator", "--profile", "square:1,2,0"),
         "Error: bad profile 'square:1,2,0': PERIOD must be a finite number of seconds > 0, got '0'"),
    Case("emulator-square-two-numbers", ("wattsup-emulator", "--profile", "square:1,2"),
         "Error: bad profile 'square:1,2': expected square:LOW,HIGH,PERIOD (three numbers), got 2"),
    Case("emulator-seconds-0", ("wattsup-emulator", "--seconds", "0"),
         "Error: Invalid value for '--seconds': 0.0 is not in the range x>0."),
    Case("emulator-lag-nan", ("wattsup-emulator", "--lag", "nan"),
         f"Error: Invalid value for '--lag': {RANGE} x>=0, got nan"),
    Case("emulator-noise-inf", ("wattsup-emulator", "--noise", "inf"),
         f"Error: Invalid value for '--noise': {RANGE} x>=0, got inf"),
    Case("emulator-100000-meters", ("wattsup-emulator", "--meters", "100000"),
         "Error: Invalid value for '--meters': 100000 is not in the range 1<=x<=64."),
    # sweeps: blocks no GPU launches, sizes below one, shards that cannot be
    Case("sweep-block-1000000", ("sweep", str(BUG_CU), "-k", "add_ok", "-p", "n=64", "--block", "1000000", "--dry-run"),
         "Error: block '1000000': 1000000x1x1 is 1000000 threads: CUDA takes at most 1024 threads per block, "
         "at most 1024x1024x64 along x, y, z"),
    Case("sweep-block-2048-threads", ("sweep", str(BUG_CU), "-k", "add_ok", "-p", "n=64", "--block", "32,32,2", "--dry-run"),
         "Error: block '32,32,2': 32x32x2 is 2048 threads: CUDA takes at most 1024 threads per block, "
         "at most 1024x1024x64 along x, y, z"),
    Case("sweep-negative-size", ("sweep", str(BUG_CU), "-k", "add_ok", "-p", "n=-5", "--dry-run"),
         "Error: no configuration can be launched: UsageError: add_ok: 'x' is sized from n=-5, which gives -5 "
         "elements; sizes must be positive"),
    Case("merge-shard-one-number", ("merge", "{crafted}", str(SHARD_1), "--out", "{tmp}/m"),
         "Error: {crafted}: shard [1]: expected [INDEX, COUNT], two integers", crafted=shard_with([1])),
    Case("merge-shard-minus-1", ("merge", "{crafted}", str(SHARD_1), "--out", "{tmp}/m"),
         "Error: {crafted}: shard [-1, 2]: the index must be from 0 to 1 (0 <= INDEX < COUNT)",
         crafted=shard_with([-1, 2])),
    Case("merge-shard-7-of-2", ("merge", "{crafted}", str(SHARD_1), "--out", "{tmp}/m"),
         "Error: {crafted}: shard [7, 2]: the index must be from 0 to 1 (0 <= INDEX < COUNT)",
         crafted=shard_with([7, 2])),
    Case("merge-shard-of-10**12", ("merge", "{crafted}", str(SHARD_1), "--out", "{tmp}/m"),
         "Error: {crafted}: shard [0, 1000000000000]: a sweep of 16 parameter points is split into 1 to 1024 "
         "shards, not 1000000000000", crafted=shard_with([0, 10**12])),
    Case("merge-shard-true", ("merge", "{crafted}", str(SHARD_1), "--out", "{tmp}/m"),
         "Error: {crafted}: shard True: expected [INDEX, COUNT], two integers", crafted=shard_with(True)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_value_is_one_line_naming_it(case: Case, saved: Path, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    crafted = case.crafted(tmp_path) if case.crafted is not None else None
    names = {"run": str(saved), "tmp": str(tmp_path), "crafted": str(crafted)}
    argv = [a.format(**names) for a in case.argv]
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke_within(argv, HANG_S, f"the command did not answer within {HANG_S} s")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [case.error.format(**names)], result.stderr
    assert result.exit_code == case.code
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
