"""The words of windows.csv and the phase summaries, each named once: the window flags, the phase
flags, the estimators and the columns an estimate may add (docs/result-format.md lists them all).
"""

from __future__ import annotations

# -- window flags ---------------------------------------------------------------------------------
#: shorter than two update periods of the channel, where no estimator places its energy confidently
SHORT_WINDOW = "short_window"
#: the samples do not reach both edges: the energy is NaN
UNCOVERED = "uncovered"
#: samples around the window are further apart than three update periods
GAP = "gap"
#: the counter went down, or rose faster than any device draws, around the window: NaN
COUNTER_RESET = "counter_reset"
#: the counter held one value for several update periods while its samples kept coming: NaN
STUCK_COUNTER = "stuck_counter"
#: a negative reading near the window was rejected, not integrated
NEGATIVE_POWER = "negative_power"
#: a NaN or infinite reading near the window was rejected
INVALID_READING = "invalid_reading"
#: offline: a log row without a power value ([N/A]) near the window
MISSING_POWER = "missing_power"
#: readings of one instant near the window were averaged
DUPLICATE_SAMPLES = "duplicate_samples"
#: offline: the log's clock stepped back near the window; energy is NaN
CLOCK_STEP = "clock_step"
#: a wall meter's window shorter than MLPerf Power's minimum (``MLPERF_MIN_WINDOW_S``)
SHORT_FOR_METER = "meter_window_under_60s"
#: a counter tick beside an edge lies off the counter's update grid (``tickgrid.py``)
TICK_OFF_GRID = "tick_off_grid"
#: the counter's ticks spread about their grid by more than a regular grid's (``tickgrid.py``)
IRREGULAR_TICKS = "irregular_ticks"
#: the idle baseline's power is above the window's mean power, so its dynamic energy is negative
#: (the baseline was not idle, or the work draws less than it)
IDLE_ABOVE_LOAD = "idle_above_load"
#: a Ctrl-C or SIGTERM closed the window before its work ended
INTERRUPTED = "interrupted"

#: MLPerf Power's guidance: wall-meter windows shorter than this are not trustworthy. Units: s.
MLPERF_MIN_WINDOW_S = 60.0

# -- phase flags ----------------------------------------------------------------------------------
#: IQR/median of time or energy per iteration >= 10 %
NOISY = "noisy"
#: energy known for fewer trials than were measured
PARTIAL = "partial"

# -- estimators (windows.csv's ``estimator``; a counter window with fine samples beside it names
# each edge's: ``fused/counter``) -----------------------------------------------------------------
#: a counter's increment spread evenly over its tick interval (linear interpolation)
COUNTER = "counter"
#: the increment spread as the fine power samples say (``fusion.py``)
FUSED = "fused"
#: a synced window's start read as ``fused`` with the rise the samples place just before it moved
#: onto it (the edge estimators)
ANCHORED = "anchored"
#: power samples integrated
POWER = "power"

# -- columns an estimate adds to windows.csv ------------------------------------------------------
#: the farthest off-grid tick beside an edge. Units: ms.
TICK_OFF_GRID_COLUMN = "tick_off_grid_ms"
#: an irregular grid's spread (robust sd). Units: ms.
TICK_SPREAD_COLUMN = "tick_spread_ms"
