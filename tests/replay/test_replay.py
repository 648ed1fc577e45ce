"""The replay power source: CSV and samples.parquet, aligned to now or to their own times."""

import time

import numpy as np
import pytest

import energyframe as ef
from energyframe.errors import PowerSourceError
from energyframe.lifecycle.config import RunSettings
from energyframe.plugin import ClockBase, Quantity, Scope, SourceContext
from energyframe.power.replay import ReplayPowerSource
from tests.fakes import ListWorkload, SignalSource, busy_phase


def drain_for(source, seconds):
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.extend(source.read())
        time.sleep(0.01)
    return out


def test_csv_is_replayed_live_from_now(power_csv):
    csv = power_csv(lambda t: 100 + t, period_s=0.1, duration_s=10.0)
    source = ReplayPowerSource(name="meter", file=csv)
    before = time.monotonic()
    (channel,) = source.start(SourceContext())
    after = time.monotonic()
    assert channel.name == "meter" and channel.quantity == Quantity.POWER
    assert channel.resolution_s == pytest.approx(0.1)
    assert channel.clock == ClockBase.MONOTONIC
    samples, deadline = [], time.monotonic() + 60
    while len(samples) < 3:
        assert time.monotonic() < deadline
        last_read_s = time.monotonic()
        samples.extend(source.read())
        time.sleep(0.01)
    origin = samples[0].time_s
    assert before <= origin <= after  # the recording starts when the source starts
    assert [s.time_s - origin for s in samples] == pytest.approx([0.1 * k for k in range(len(samples))])
    assert [s.value for s in samples[:3]] == pytest.approx([100.0, 100.1, 100.2])
    # only what is due by now, not the whole file: the next sample was not due at the last read
    assert origin + 0.1 * len(samples) > last_read_s
    source.stop()
    stopped = time.monotonic()
    assert all(s.time_s <= stopped for s in source.read())  # what came due until the stop
    assert source.read() == []


def test_loop_continues_a_counter_without_a_reset(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text("time_s,energy_j\n" + "".join(f"{1.7e9 + 0.05 * i},{10.0 * i}\n" for i in range(5)))
    source = ReplayPowerSource(name="c", file=path, loop=True)
    (channel,) = source.start(SourceContext())
    assert channel.quantity == Quantity.ENERGY
    samples = drain_for(source, 0.6)
    source.stop()
    values = np.array([s.value for s in samples])
    times = np.array([s.time_s for s in samples])
    assert len(samples) >= 10
    assert np.all(np.diff(values) > 0) and np.all(np.diff(times) > 0)
    assert np.allclose(np.diff(values) / np.diff(times), 200.0)  # 10 J per 50 ms, across loops too


def test_a_saved_run_replays_with_its_channel_descriptions(tmp_path):
    out = tmp_path / "recorded"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu", watts=300.0)],
        reporters=[],
        out=out,
        settings=RunSettings(trials=2, min_window_s=0.1, warmup_s=0.0),
    )
    source = ReplayPowerSource(
        name="again", file=out / "samples.parquet", prefix="old.", channels="gpu,gpu.power"
    )
    channels = {c.name: c for c in source.start(SourceContext())}
    source.stop()
    assert set(channels) == {"old.gpu", "old.gpu.power"}
    assert channels["old.gpu"].quantity == Quantity.ENERGY and channels["old.gpu"].scope == Scope.GPU
    assert channels["old.gpu"].resolution_s == pytest.approx(0.01)
    assert channels["old.gpu.power"].primary is False


def test_replay_drives_a_run_with_the_recorded_power(tmp_path):
    out = tmp_path / "recorded"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu", watts=300.0)],
        reporters=[],
        out=out,
        settings=RunSettings(trials=2, min_window_s=0.1, warmup_s=0.0),
    )
    result = ef.run(
        ListWorkload([busy_phase()]),
        power=[f"replay:file={out}/samples.parquet,channels=gpu,loop=true"],
        reporters=[],
        settings=RunSettings(trials=2, min_window_s=0.1, warmup_s=0.0),
    )
    assert result.windows["mean_power_w"].to_numpy() == pytest.approx(300.0, rel=0.02)


def test_absolute_alignment_keeps_recorded_wall_times(power_csv):
    start = time.time() - 5.0
    csv = power_csv(42.0, period_s=0.5, duration_s=2.0, start_s=start)
    source = ReplayPowerSource(name="past", file=csv, align="absolute")
    (channel,) = source.start(SourceContext())
    assert channel.clock == ClockBase.WALL
    samples = source.read()
    source.stop()
    assert len(samples) == 5
    assert samples[0].time_s == pytest.approx(start)


@pytest.mark.parametrize(
    "content,message",
    [
        ("t,power_w\n1,2\n", "needs a time_s column (Unix seconds); it has ['t', 'power_w']"),
        ("time_s,watts\n1,2\n", "needs a power_w or energy_j column; it has ['time_s', 'watts']"),
        ("time_s,power_w\n1,x\n2,3\n", "has missing or non-numeric values"),
    ],
)
def test_bad_csv_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(
        PowerSourceError,
        match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)"),
    ):
        ReplayPowerSource(name="r", file=path).start(SourceContext())


def test_unknown_channel_of_a_parquet(tmp_path):
    out = tmp_path / "recorded"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu")],
        reporters=[],
        out=out,
        settings=RunSettings(trials=1, min_window_s=0.05, warmup_s=0.0),
    )
    with pytest.raises(PowerSourceError, match=r"has no channel\(s\) \['cpu'\]"):
        ReplayPowerSource(name="r", file=out / "samples.parquet", channels="cpu").start(SourceContext())


def test_the_earlier_tools_wattsup_csv_replays_with_its_timing(tmp_path):
    """A wall-meter log keeps what its timestamps mean, and its negative record is replayed as
    recorded (a run's sample store decides what to do with it)."""
    from energyframe.plugin import Timing

    start = time.time() - 10.0
    rows = [
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start + i))},{i},100.0,{-100.0 if i == 2 else 50.0}"
        for i in range(5)
    ]
    path = tmp_path / "power.csv"
    path.write_text("time,id,pm1,sum\n" + "\n".join(rows) + "\n")
    source = ReplayPowerSource(name="wall", file=path, align="absolute", channels="sum")
    (channel,) = source.start(SourceContext())
    samples = source.read()
    source.stop()
    assert channel.name == "sum" and channel.scope == Scope.SYSTEM_WALL
    assert (channel.timing, channel.averaging_s) == (Timing.UNKNOWN, 1.0)
    assert [s.value for s in samples] == [50.0, 50.0, -100.0, 50.0, 50.0]


def test_an_nvidia_smi_log_replays_and_skips_na_rows(tmp_path):
    start = time.time() - 5.0
    lines = ["timestamp, index, uuid, power.draw.instant [W], power.draw.average [W]"]
    for i in range(10):
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(start + 0.1 * i))
        stamp += f".{int(round(((start + 0.1 * i) % 1) * 1000)) % 1000:03d}"
        instant = "[N/A]" if i == 3 else ("-500.00" if i == 4 else "300.00")
        lines.append(f"{stamp}, 0, GPU-0, {instant}, 290.00")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    source = ReplayPowerSource(name="smi", file=path, prefix="old.")
    channels = {c.name: c for c in source.start(SourceContext())}
    samples = drain_for(source, 1.2)
    source.stop()
    assert set(channels) == {"old.gpu0", "old.gpu0.power_average"}
    assert channels["old.gpu0"].scope == Scope.GPU and channels["old.gpu0.power_average"].primary is False
    values = [s.value for s in samples if s.channel == "old.gpu0"]
    assert values == [300.0, 300.0, 300.0, -500.0, 300.0, 300.0, 300.0, 300.0, 300.0]  # [N/A]: no sample
