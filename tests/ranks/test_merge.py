"""Merging the ranks' parts into one run (rank 0's job): channel names, rank and host columns,
clocks moved onto rank 0's timeline, the per-window total and when it is unknown, summaries,
run.json's merged fields, and the status of the whole run. Parts are built by hand with known
energies, so every expected number is written out."""

import math

import pandas as pd
import pytest

from energyframe.core.vocabulary import PARTIAL
from energyframe.core.windows import WINDOW_COLUMNS
from energyframe.model import DerivedTable
from energyframe.ranks.merge import INCOMPLETE_TOTAL, TOTAL, RankPart, merge_parts, rank_shift_s, run_status
from energyframe.results.result import COMPLETE, INCOMPLETE, RunResult


def windows(channel, watts, durations, start_s=1000.0, dynamic_w=None, flags=None):
    rows = []
    for trial, duration in enumerate(durations):
        start = start_s + 10 * trial
        energy = watts[trial] * duration if isinstance(watts, list) else watts * duration
        row = {
            "phase": "step",
            "trial": trial,
            "channel": channel,
            "start_s": start,
            "end_s": start + duration,
            "duration_s": duration,
            "iterations": 4,
            "time_per_iter_s": duration / 4,
            "energy_j": energy,
            "mean_power_w": energy / duration,
            "energy_per_iter_j": energy / 4,
            "flags": (flags or {}).get(trial, ""),
        }
        if dynamic_w is not None:
            row["dynamic_energy_j"] = energy - dynamic_w * duration
            row["dynamic_energy_per_iter_j"] = row["dynamic_energy_j"] / 4
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in WINDOW_COLUMNS:
        if column not in frame:
            frame[column] = math.nan
    return frame[WINDOW_COLUMNS]


def part(rank, frame, channel="gpu0", anchor=(5000.0, 4000.0), warnings=(), tables=(), status=COMPLETE,
         reason=None, devices=True):
    meta = {
        "format_version": 1,
        "status": status,
        "reason": reason,
        "clock": {"anchor_wall_s": anchor[0], "anchor_monotonic_s": anchor[1]},
        "primary_channels": [channel] if channel else [],
        "sources": [{"name": "nvml", "info": {"gpus": [{"index": rank}]}, "channels": [{"name": channel, "quantity": "energy"}]}]
        if channel
        else [],
        "warnings": list(warnings),
        "notes": [],
        "idle_baseline": {channel: {"power_w": 20.0}} if channel else {},
        "derived": [t.to_json() for t in tables],
        "workload": {"name": "w", "info": {"rank": rank}},
    }
    samples = pd.DataFrame(
        {"source": ["nvml"], "channel": [channel], "time_s": [1000.0], "value": [1.0], "unit": ["J"]}
    )
    result = RunResult(meta, frame, samples)
    return RankPart(
        rank=rank,
        local_rank=rank,
        host=f"node{rank}",
        status=status,
        reason=reason,
        result=result,
        device_channels=[channel] if channel and devices else [],
        work={"step": {"tokens": 8.0}},
    )


def test_two_ranks_become_one_run_with_a_total():
    tokens = DerivedTable("tokens", "per token", [{"phase": "step", "energy_per_token_j": 1.0}], display=("phase",))
    parts = {
        0: part(0, windows("gpu0", 100.0, [0.5, 0.25], dynamic_w=20.0), tables=[tokens]),
        # rank 1's clock: its Unix time is 0.5 s ahead of its monotonic time more than rank 0's,
        # and its monotonic clock is 0.2 s ahead of rank 0's
        1: part(
            1,
            windows("gpu1", 50.0, [0.5, 0.25], dynamic_w=20.0, flags={1: "short-window"}),
            channel="gpu1",
            anchor=(5000.5, 4000.0),
            warnings=["clock throttled"],
            tables=[tokens],
        ),
    }
    result = merge_parts(
        parts, {0: 0.0, 1: 0.2}, world_size=2, status=COMPLETE, reason=None, distributed={"world_size": 2}
    )
    w = result.windows
    assert list(w.columns[: len(WINDOW_COLUMNS) + 2]) == [*WINDOW_COLUMNS, "rank", "host"]
    # window by window: rank 0, rank 1, then the total
    assert list(w["channel"]) == ["rank0.gpu0", "rank1.gpu1", TOTAL] * 2
    assert list(w["rank"].astype("object")) == [0, 1, pd.NA] * 2
    assert list(w["host"]) == ["node0", "node1", ""] * 2
    total = w[w["channel"] == TOTAL]
    assert list(total["energy_j"]) == pytest.approx([75.0, 37.5])
    assert list(total["mean_power_w"]) == pytest.approx([150.0, 150.0])
    # dynamic energy: (100 - 20) W + (50 - 20) W over the window
    assert list(total["dynamic_energy_j"]) == pytest.approx([55.0, 27.5])
    assert list(total["flags"]) == ["", "short-window"]  # a part's flag is the total's
    # rank 1's times moved by 5000.0 - 5000.5 - 0.2 = -0.7 s; rank 0's stay
    r1 = w[w["channel"] == "rank1.gpu1"]
    assert list(r1["start_s"]) == pytest.approx([999.3, 1009.3])
    assert list(w[w["channel"] == "rank0.gpu0"]["start_s"]) == [1000.0, 1010.0]
    assert rank_shift_s(parts[0].result.run_meta, parts[1].result.run_meta, 0.2) == pytest.approx(-0.7)
    # summaries per rank channel and for the total
    by = {s.channel: s for s in result.summaries}
    assert set(by) == {"rank0.gpu0", "rank1.gpu1", TOTAL}
    assert by[TOTAL].energy_per_iter_j.median == pytest.approx((75.0 / 4 + 37.5 / 4) / 2)
    assert by["rank1.gpu1"].mean_power_w.median == pytest.approx(50.0)
    assert by[TOTAL].work == {"tokens": 8.0}
    meta = result.meta
    assert meta["primary_channels"] == ["rank0.gpu0", "rank1.gpu1", TOTAL]
    assert [(s["rank"], [c["name"] for c in s["channels"]]) for s in meta["sources"]] == [
        (0, ["rank0.gpu0"]),
        (1, ["rank1.gpu1"]),
    ]
    assert meta["warnings"] == ["rank 1: clock throttled"]
    assert set(meta["idle_baseline"]) == {"rank0.gpu0", "rank1.gpu1"}
    assert meta["distributed"] == {"world_size": 2}
    (table,) = result.derived
    assert [r["rank"] for r in table.rows] == [0, 1] and table.display == ("rank", "phase")
    assert list(result.samples["channel"]) == ["rank0.gpu0", "rank1.gpu1"]
    assert list(result.samples["time_s"]) == pytest.approx([1000.0, 999.3])


def test_a_window_with_an_unknown_part_has_no_total():
    parts = {
        0: part(0, windows("gpu0", 100.0, [0.5, 0.5])),
        1: part(1, windows("gpu1", [50.0, math.nan], [0.5, 0.5]), channel="gpu1"),
    }
    result = merge_parts(parts, {}, world_size=2, status=COMPLETE, reason=None, distributed={})
    total = result.windows[result.windows["channel"] == TOTAL]
    assert total["energy_j"].iloc[0] == pytest.approx(75.0)
    assert math.isnan(total["energy_j"].iloc[1])
    assert list(total["flags"]) == ["", INCOMPLETE_TOTAL]
    summary = result.summary("step", TOTAL)
    assert summary.energy_per_iter_j.n == 1 and INCOMPLETE_TOTAL in summary.flags and PARTIAL in summary.flags


def test_a_missing_rank_leaves_every_total_unknown_and_the_run_incomplete():
    parts = {0: part(0, windows("gpu0", 100.0, [0.5])), 1: part(1, windows("gpu1", 50.0, [0.5]), channel="gpu1")}
    status, reason = run_status(parts, 3, None)
    assert (status, reason) == (INCOMPLETE, "the measurements of rank(s) 2 did not reach rank 0")
    result = merge_parts(parts, {}, world_size=3, status=status, reason=reason, distributed={})
    total = result.windows[result.windows["channel"] == TOTAL]
    assert math.isnan(total["energy_j"].iloc[0]) and total["flags"].iloc[0] == INCOMPLETE_TOTAL
    assert result.status == INCOMPLETE and result.reason == reason
    # the parts that came are kept whole
    assert result.windows[result.windows["channel"] == "rank1.gpu1"]["energy_j"].iloc[0] == pytest.approx(25.0)


def test_how_the_whole_run_ended():
    ok = {0: part(0, windows("gpu0", 1.0, [0.5])), 1: part(1, windows("gpu1", 1.0, [0.5]), channel="gpu1")}
    assert run_status(ok, 2, None) == (COMPLETE, None)
    assert run_status(ok, 2, "rank 1 failed: boom") == (INCOMPLETE, "rank 1 failed: boom")
    failed = {**ok, 1: part(1, windows("gpu1", 1.0, [0.5]), channel="gpu1", status=INCOMPLETE, reason="disk")}
    assert run_status(failed, 2, None) == (INCOMPLETE, "rank 1: disk")


def test_timing_only_ranks_are_kept_but_counted_once():
    parts = {0: part(0, windows("", 0.0, [0.5, 0.5]), channel=""), 1: part(1, windows("", 0.0, [0.6, 0.6]), channel="")}
    result = merge_parts(parts, {}, world_size=2, status=COMPLETE, reason=None, distributed={})
    w = result.windows
    assert list(w["channel"]) == ["", ""] * 2 and list(w["rank"]) == [0, 1] * 2
    (summary,) = result.summaries  # rank 0's windows stand for the run's timing
    assert summary.channel == "" and summary.time_per_iter_s.n == 2
    assert summary.time_per_iter_s.median == pytest.approx(0.5 / 4)
    assert TOTAL not in set(w["channel"]) and result.meta["primary_channels"] == []


def test_a_source_on_one_rank_only_is_not_in_the_total():
    # rank 0 also has a machine-wide meter (not a device channel): it is kept, not added up
    frame = pd.concat([windows("gpu0", 100.0, [0.5]), windows("wall", 400.0, [0.5])], ignore_index=True)
    p0 = part(0, frame)
    p0.result.meta["primary_channels"].append("wall")
    parts = {0: p0, 1: part(1, windows("gpu1", 50.0, [0.5]), channel="gpu1")}
    result = merge_parts(parts, {}, world_size=2, status=COMPLETE, reason=None, distributed={})
    w = result.windows
    assert list(w["channel"]) == ["rank0.gpu0", "rank0.wall", "rank1.gpu1", TOTAL]
    assert w[w["channel"] == TOTAL]["energy_j"].iloc[0] == pytest.approx(75.0)


def test_the_ranks_messages_are_said_once_with_who_said_them():
    from energyframe.ranks.merge import said_by_ranks

    said = {0: ["slow disk"], 1: ["slow disk", "throttled"], 2: ["throttled"], 3: []}
    assert said_by_ranks(said) == ["slow disk", "rank 1: slow disk", "ranks 1, 2: throttled"]
