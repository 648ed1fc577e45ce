"""The replay power source on a bad day: a log that would play outside the run, a single row to
loop, a clock that steps back, rows of one instant. Each is refused with its cause at start, or
flags the windows it touches; none leaves a run `complete` with every window uncovered."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest

import energyframe as ef
from energyframe.errors import PowerSourceError
from energyframe.plugin import SourceContext
from energyframe.power.replay import ReplayPowerSource


def power_csv(path, times, watts=100.0):
    path.write_text("time_s,power_w\n" + "".join(f"{t!r},{watts!r}\n" for t in times))
    return path


@pytest.mark.parametrize(
    "offset_s,when",
    [
        (-86400.0, r"ended 1\.0 day before now"),
        (-3600.0, r"ended 1\.0 h before now"),
        (7200.0, r"starts 2\.0 h after now"),
    ],
)
def test_absolute_alignment_far_from_now_is_refused_with_its_cause(tmp_path, offset_s, when):
    now = time.time()
    span = (
        [now + offset_s + 0.1 * i for i in range(-50, 1)]
        if offset_s < 0
        else [now + offset_s + 0.1 * i for i in range(50)]
    )
    path = power_csv(tmp_path / "yesterday.csv", span)
    with pytest.raises(PowerSourceError) as e:
        ReplayPowerSource(name="r", file=path, align="absolute").start(SourceContext())
    assert re.fullmatch(
        rf"replay file '{re.escape(str(path))}' with align=absolute spans \S+ \S+ to \S+ \S+, which {when} "
        r"\(\S+ \S+\): no sample would fall in the run\. Use align=start to play it from now, or tz= if its times "
        r"are another zone's",
        str(e.value),
    )


def test_run_level_yesterdays_log_ends_the_run_with_its_cause(tmp_path):
    path = power_csv(tmp_path / "yesterday.csv", [time.time() - 86400 + 0.1 * i for i in range(100)])
    with pytest.raises(
        PowerSourceError, match=r"could not start: replay file .* which ended 24\.0 h before now"
    ):
        ef.run(
            "sleep:seconds=0.1",
            power=[f"replay:file={path},align=absolute"],
            reporters=[],
            out=tmp_path / "r",
        )
    assert not (tmp_path / "r" / "run.json").exists()  # nothing measured: no run directory of nothing


def test_looping_a_single_row_is_refused(tmp_path):
    path = power_csv(tmp_path / "one.csv", [1.7e9])
    with pytest.raises(PowerSourceError) as e:
        ReplayPowerSource(name="one", file=path, loop=True).start(SourceContext())
    assert str(e.value) == (
        f"replay file '{path}' has a single sample of 'one': loop=true needs two or more to know how long the "
        "recording lasts"
    )


def test_a_log_whose_clock_steps_back_is_refused(tmp_path):
    times = [1.7e9 + i for i in range(50)] + [1.7e9 + 45 + i for i in range(50)]  # back 5 s after 49 s
    path = power_csv(tmp_path / "stepped.csv", times)
    with pytest.raises(PowerSourceError) as e:
        ReplayPowerSource(name="s", file=path).start(SourceContext())
    first = dt.datetime.fromtimestamp(1.7e9 + 45).strftime("%Y-%m-%d %H:%M:%S")
    last = dt.datetime.fromtimestamp(1.7e9 + 49).strftime("%Y-%m-%d %H:%M:%S")
    assert str(e.value) == (
        f"replay file '{path}': the clock of 's' steps back, so rows before and after the step both claim {first} "
        f"to {last}; which are true is unknown: cut the log at the step and replay each part"
    )


def test_rows_of_one_instant_flag_the_windows_they_touch(tmp_path):
    lines = ["timestamp, index, uuid, power.draw.instant [W]"]
    start = time.time() - 1.0
    for i in range(400):
        stamp = dt.datetime.fromtimestamp(start + 0.01 * i).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{stamp}, 0, GPU-0, 100.00")
        lines.append(f"{stamp}, 0, GPU-0, 300.00")  # a second row for GPU 0 at each instant
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    result = ef.run(
        "sleep:seconds=0.2",
        power=[f"replay:file={path},loop=true"],
        reporters=[],
        out=tmp_path / "r",
        settings=ef.RunSettings(trials=3, warmup_s=0.0),
    )
    assert result.windows["flags"].str.contains("duplicate_samples").all()
    assert any(
        "duplicated timestamp(s) in gpu0; their values were averaged" in w for w in result.meta["warnings"]
    )
