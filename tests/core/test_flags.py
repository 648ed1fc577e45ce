"""A window's flags in a table cell: how every table writes and reads them."""

import math

import pandas as pd
import pytest

from energyframe.model import join_flags, split_flags


def test_flags_written_to_a_cell_read_back_in_order():
    flags = ["gap", "short_window", "idle_above_load"]
    assert join_flags(flags) == "gap;short_window;idle_above_load"
    assert split_flags(join_flags(flags)) == flags


@pytest.mark.parametrize("cell", ["", None, math.nan, pd.NA, ";", ";;"])
def test_an_empty_or_missing_cell_holds_no_flags(cell):
    # a CSV read back gives NaN for an empty cell: it is no flag called "nan"
    assert split_flags(cell) == []


def test_stray_separators_leave_no_empty_flags():
    assert split_flags(";gap;;partial;") == ["gap", "partial"]


def test_a_csv_round_trip_keeps_each_window_s_flags(tmp_path):
    frame = pd.DataFrame({"trial": [0, 1], "flags": [join_flags(["gap", "short_window"]), join_flags([])]})
    frame.to_csv(tmp_path / "w.csv", index=False)
    back = pd.read_csv(tmp_path / "w.csv")
    assert [split_flags(c) for c in back["flags"]] == [["gap", "short_window"], []]
