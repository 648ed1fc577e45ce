"""Comparing runs: an exact Mann–Whitney U test over trials, ratios of medians, verdicts.

Pure: values in, figures out; nothing here reads files or prints. docs/comparing.md explains
the choices (why a rank test, why at least three trials per run, why a minimum change).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..core.stats import Spread
from ..core.summary import window_bound
from ..core.uncertainty import Bound, summary_bound
from ..errors import UsageError

#: fewer trials than this on either side are never called a significant difference
MIN_TRIALS = 3
DEFAULT_ALPHA = 0.05
#: changes smaller than this (in %) are "not significant" whatever the test says: trials of one
#: run vary less than runs taken at different times do (docs/comparing.md)
DEFAULT_MIN_CHANGE_PCT = 1.0
#: pooled trials up to which the exact distribution of U is computed (a normal approximation,
#: corrected for ties, above)
EXACT_MAX_TOTAL = 60

#: figure -> (windows.csv column, unit, word when larger, word when smaller)
FIGURES: dict[str, tuple[str, str, str, str]] = {
    "time": ("time_per_iter_s", "s", "slower", "faster"),
    "energy": ("energy_per_iter_j", "J", "more energy", "less energy"),
    "power": ("mean_power_w", "W", "more power", "less power"),
    "dynamic": ("dynamic_energy_per_iter_j", "J", "more dynamic energy", "less dynamic energy"),
}
DEFAULT_FIGURES = ("time", "energy")

#: kinds of rows, in the order they are shown
KINDS = ("phase", "stage", "layer", "configuration", "op", "derived")


@dataclass(frozen=True)
class RankTest:
    """Two-sided Mann–Whitney U test of two samples (ties get their mean rank).

    Args:
        u: U of the first sample ``a`` (the reference, in a comparison): the pairs (a, b) with
            a > b, a tie counting one half (scipy's ``mannwhitneyu(a, b).statistic``); the
            second sample's U is ``n_a * n_b - u``.
        p_value: the probability, with no difference between the two, of a U at least as far
            from its mean as the one seen.
        method: ``exact`` (the permutation distribution of the ranks, ties included) or
            ``normal`` (the tie-corrected normal approximation, for many trials).
    """

    u: float
    p_value: float
    n_a: int
    n_b: int
    method: str


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]


def midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N, tied values sharing the mean of the ranks they span."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)
    return (last - (counts - 1) / 2.0)[inverse]


def _exact_p(doubled_ranks: np.ndarray, n_a: int, observed: int) -> float:
    """P(|W - E W| >= |observed - E W|) over every choice of ``n_a`` of the pooled ranks, where W
    is the sum of the chosen (doubled, hence integer) ranks."""
    total = int(doubled_ranks.sum())
    # ways[k, s]: how many k-subsets of the ranks seen so far sum to s (floats: C(60, 30) ~ 1e17)
    ways = np.zeros((n_a + 1, total + 1))
    ways[0, 0] = 1.0
    for r in doubled_ranks.astype(int):
        ways[1:, r:] += ways[:-1, : total + 1 - r].copy()
    dist = ways[n_a]
    mean = n_a * total // len(doubled_ranks)  # n_a (N + 1), an integer in doubled ranks
    distance = np.abs(np.arange(total + 1) - mean)
    return float(dist[distance >= abs(observed - mean)].sum() / dist.sum())


def mann_whitney(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> RankTest:
    """The two-sided Mann–Whitney U test of ``a`` against ``b`` (NaNs left out).

    Exact for up to ``EXACT_MAX_TOTAL`` pooled values, ties included (the conditional
    permutation distribution of the mid-ranks); above, the normal approximation with the tie
    and continuity corrections. With an empty side the p-value is NaN.
    """
    x, y = _finite(a), _finite(b)
    n_a, n_b = x.size, y.size
    if n_a == 0 or n_b == 0:
        return RankTest(math.nan, math.nan, n_a, n_b, "none")
    ranks = midranks(np.concatenate([x, y]))
    w_a = float(ranks[:n_a].sum())
    u = w_a - n_a * (n_a + 1) / 2.0
    n = n_a + n_b
    if n <= EXACT_MAX_TOTAL:
        doubled = np.rint(2 * ranks).astype(int)
        # the smaller side keeps the table small; the two-sided p-value is the same
        if n_a <= n_b:
            p = _exact_p(doubled, n_a, int(doubled[:n_a].sum()))
        else:
            p = _exact_p(doubled, n_b, int(doubled[n_a:].sum()))
        return RankTest(u, min(1.0, p), n_a, n_b, "exact")
    _, counts = np.unique(ranks, return_counts=True)
    ties = float(np.sum(counts**3 - counts))
    variance = n_a * n_b / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return RankTest(u, 1.0, n_a, n_b, "normal")
    z = max(0.0, abs(u - n_a * n_b / 2.0) - 0.5) / math.sqrt(variance)
    return RankTest(u, min(1.0, math.erfc(z / math.sqrt(2.0))), n_a, n_b, "normal")


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value the exact test can give with ``n_a`` and ``n_b`` trials
    (every trial of one run beyond every trial of the other, no ties)."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def trials_needed(alpha: float) -> int:
    """The fewest trials per run (the same in both) with which a difference can reach ``alpha``."""
    n = MIN_TRIALS
    while smallest_p(n, n) >= alpha:
        n += 1
    return n


@dataclass(frozen=True)
class Change:
    """One figure of one run against the reference run.

    Args:
        ratio: median of this run / median of the reference (NaN when either is missing).
        test: the rank test over the two runs' trials (``None`` for figures without trials).
        significant: the test's p-value is under alpha, each run has ``MIN_TRIALS`` trials,
            and the change is at least the minimum change.
        verdict: for people, e.g. ``1.10× more energy, significant (p=0.008)``.
    """

    ratio: float
    test: RankTest | None
    significant: bool
    verdict: str

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.ratio - 1.0) if math.isfinite(self.ratio) else math.nan


def percent_text(pct: float, signed: bool = True) -> str:
    """A change in %, written the same way in the change column and in a verdict: two
    decimals, or two significant digits under 0.1 % (``-0.016%``, never ``-0.02%``)."""
    sign = "+" if signed else ""
    if pct == 0 or abs(pct) >= 0.1:
        return f"{pct:{sign}.2f}%"
    return f"{pct:{sign}.2g}%"


def factor_text(ratio: float, figure: str) -> str:
    """``1.1, "energy"`` -> ``1.10× more energy``; ``0.5, "time"`` -> ``2.00× faster``; a change
    under 0.1 % as the change column shows it (``0.016% faster`` beside ``-0.016%``)."""
    _, _, more, less = FIGURES.get(figure, ("", "", "larger", "smaller"))
    if ratio == 1.0:
        return "no change"
    word = more if ratio > 1 else less
    factor = ratio if ratio > 1 else 1.0 / ratio
    if factor < 1.001:
        return f"{percent_text(abs(100 * (ratio - 1)), signed=False)} {word}"
    return f"{factor:.{3 if factor < 1.01 else 2}f}× {word}"


def _p_text(p: float) -> str:
    return f"p={p:.2g}" if p >= 0.001 else "p<0.001"


def _inside_bounds(
    difference: float, bounds: tuple[Bound | None, Bound | None] | None, same_board: bool
) -> float | None:
    """The two medians' bounds combined (random parts only on one board, where the sensor's
    systematic error is the same in both and cancels), when the difference lies inside it."""
    if bounds is None or bounds[0] is None or bounds[1] is None:
        return None
    if same_board:
        limit = math.hypot(bounds[0].random_j, bounds[1].random_j)
    else:
        limit = math.hypot(bounds[0].total_j, bounds[1].total_j)
    return limit if math.isfinite(limit) and abs(difference) <= limit else None


def _why_not_significant(
    test: RankTest,
    ratio: float,
    alpha: float,
    min_change_pct: float,
    limit: float | None,
    median_a: float,
) -> str | None:
    """Why a change is not called significant, as the verdict's words after "not significant"
    (None when it is significant). The reasons are tried in the order a reader checks them:
    enough trials, the test, the minimum change, the medians' bounds."""
    few = min(test.n_a, test.n_b)
    if few < MIN_TRIALS:
        return f": {few} trial{'s' if few != 1 else ''}, need at least {MIN_TRIALS} per run"
    if not (test.p_value < alpha):
        return _p_not_under_alpha(test, alpha)
    if not math.isfinite(ratio) or abs(100.0 * (ratio - 1.0)) < min_change_pct:
        return f": under the {min_change_pct:g} % minimum change ({_p_text(test.p_value)})"
    if limit is not None:
        return (
            f": inside the two runs' 95 % bounds "
            f"(±{100.0 * limit / abs(median_a):.2g} % together; {_p_text(test.p_value)})"
        )
    return None


def _p_not_under_alpha(test: RankTest, alpha: float) -> str:
    """The words for a p-value not under alpha: the p-value, or, where no p-value these trials
    can give would be, how many trials would do."""
    floor = smallest_p(test.n_a, test.n_b)
    if floor >= alpha:
        return (
            f": with {test.n_a} and {test.n_b} trials no difference can reach "
            f"p<{alpha:g} (the smallest p is {floor:.2g}); measure at least "
            f"{trials_needed(alpha)} trials per run"
        )
    return f" ({_p_text(test.p_value)})"


def judge(
    figure: str,
    reference: Sequence[float] | np.ndarray,
    other: Sequence[float] | np.ndarray,
    alpha: float = DEFAULT_ALPHA,
    min_change_pct: float = DEFAULT_MIN_CHANGE_PCT,
    bounds: tuple[Bound | None, Bound | None] | None = None,
    same_board: bool = True,
) -> Change:
    """Compare the trials of one figure: the ratio of medians and whether it is significant.

    ``bounds`` are the 95 % bounds of the two medians (``uncertainty.summary_bound``): a
    difference inside them combined is never called significant, whatever the test says.
    """
    a, b = _finite(reference), _finite(other)
    if a.size == 0 or b.size == 0:
        missing = "the reference" if a.size == 0 else "this run"
        return Change(math.nan, None, False, f"not measured in {missing}")
    median_a, median_b = float(np.median(a)), float(np.median(b))
    ratio = median_b / median_a if median_a != 0 else math.nan
    test = mann_whitney(a, b)
    factor = factor_text(ratio, figure) if math.isfinite(ratio) else "no ratio (reference median is 0)"
    limit = _inside_bounds(median_b - median_a, bounds, same_board)
    reason = _why_not_significant(test, ratio, alpha, min_change_pct, limit, median_a)
    if reason is not None:
        return Change(ratio, test, False, f"{factor}, not significant{reason}")
    return Change(ratio, test, True, f"{factor}, significant ({_p_text(test.p_value)})")


def check_thresholds(alpha: float, min_change_pct: float) -> None:
    """Refuse a significance level or minimum change no verdict can be made with: NaN compares
    false with every p-value, so ``alpha=nan`` would call every difference "not significant".

    Raises:
        UsageError: naming the value and what is valid.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise UsageError(f"alpha must be a number between 0 and 1 (exclusive), got {alpha!r}")
    valid = isinstance(min_change_pct, (int, float)) and not isinstance(min_change_pct, bool)
    if not valid or not (math.isfinite(min_change_pct) and min_change_pct >= 0):
        raise UsageError(f"the minimum change must be a finite number of % >= 0, got {min_change_pct!r}")


@dataclass(frozen=True)
class Row:
    """One figure of one phase (or layer, configuration, op) on one channel, in every run.

    Args:
        kind: ``phase``, ``stage``, ``layer``, ``configuration``, ``op`` or ``derived``.
        name: the phase name (or, for ``derived``, ``table.column``).
        channel: the channel, empty for latency (the same on every channel) and timing-only runs.
        figure: ``time``, ``energy``, ``power``, ``dynamic`` (or a derived column name).
        spreads: per run, the spread over trials (``None`` where the run lacks the row, and
            for derived figures).
        values: per run, the median (or the derived value); NaN where missing.
        changes: per run, the change against the first run (``None`` for the first run and
            where either lacks the row).
        bounds: per run, the 95 % bound of the median (energy figures of runs that record one).
    """

    kind: str
    name: str
    channel: str
    figure: str
    unit: str
    spreads: tuple[Spread | None, ...]
    values: tuple[float, ...]
    changes: tuple[Change | None, ...]
    bounds: tuple[Bound | None, ...] = ()

    def bound_pct(self, i: int) -> float:
        """Run ``i``'s total 95 % bound in % of its median (NaN without one)."""
        bound = self.bounds[i] if i < len(self.bounds) else None
        return bound.pct(self.values[i]) if bound is not None else math.nan


@dataclass(frozen=True)
class Comparison:
    """Every row of a comparison of runs against the first one, and why they may not compare."""

    labels: tuple[str, ...]
    rows: tuple[Row, ...]
    warnings: tuple[str, ...] = ()
    alpha: float = DEFAULT_ALPHA
    min_change_pct: float = DEFAULT_MIN_CHANGE_PCT
    only_in: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        return self.labels[0]


def trial_values(windows: pd.DataFrame, figure: str) -> dict[tuple[str, str], np.ndarray]:
    """Per (phase, channel), the figure's value in each trial. Latency is taken once per
    window (it is the same on every channel) under channel ``""``."""
    column = FIGURES[figure][0]
    if windows.empty or column not in windows.columns:
        return {}
    frame = windows
    if figure == "time":
        frame = windows.drop_duplicates(["phase", "trial"]).assign(channel="")
    out = {}
    for (phase, channel), group in frame.groupby(["phase", "channel"], sort=False):
        values = pd.to_numeric(group[column], errors="coerce").to_numpy(float)
        if np.isfinite(values).any():
            out[(str(phase), str(channel))] = values
    return out


def trial_bounds(windows: pd.DataFrame, figure: str) -> dict[tuple[str, str], Bound]:
    """Per (phase, channel), the 95 % bound of the median energy per iteration over the trials
    (energy figures of runs that record bounds only)."""
    if figure not in ("energy", "dynamic") or windows.empty or "energy_random_j" not in windows.columns:
        return {}
    column = FIGURES[figure][0]
    out = {}
    for (phase, channel), group in windows.groupby(["phase", "channel"], sort=False):
        bounds = _bounds_per_iteration(group.to_dict("records"), figure)
        bound = summary_bound(pd.to_numeric(group[column], errors="coerce"), bounds)
        if bound is not None:
            out[(str(phase), str(channel))] = bound
    return out


def _bounds_per_iteration(rows: Sequence[Mapping], figure: str) -> list[Bound]:
    """The bound of each window that has one and counted its iterations, per iteration (of
    dynamic energy for the ``dynamic`` figure)."""
    bounds = []
    for row in rows:
        bound, iterations = window_bound(row), row.get("iterations") or 0
        if bound is not None and iterations:
            if figure == "dynamic":
                bound = _dynamic(bound, row.get("dynamic_energy_bound_j"))
            bounds.append(bound.scaled(1.0 / iterations))
    return bounds


def _dynamic(bound: Bound, dynamic_bound_j: object) -> Bound:
    """A window's bound of dynamic energy: the idle baseline's share (what
    ``dynamic_energy_bound_j`` adds to the window's own bound) is the same on every window."""
    try:
        total = float(dynamic_bound_j)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return bound
    if not math.isfinite(total):
        return bound
    idle = math.sqrt(max(total**2 - bound.total_j**2, 0.0))
    return Bound(bound.random_j, math.hypot(bound.systematic_j, idle))


def compare_trials(
    labels: Sequence[str],
    windows: Sequence[pd.DataFrame],
    channels: Sequence[set[str] | None] = (),
    kinds: Sequence[Mapping[str, str]] = (),
    figures: Sequence[str] = DEFAULT_FIGURES,
    alpha: float = DEFAULT_ALPHA,
    min_change_pct: float = DEFAULT_MIN_CHANGE_PCT,
    derived: Sequence[Mapping[str, float]] = (),
    same_board: bool = True,
) -> Comparison:
    """Compare the windows of several runs, each against the first.

    Args:
        labels: a name per run.
        windows: per run, its windows.csv.
        channels: per run, the channels to compare (``None``: all of them).
        kinds: per run, the kind of each phase (``layer``...); unnamed phases are ``phase``.
        figures: which of ``FIGURES`` to compare.
        derived: per run, figures derived from medians (``table.column`` -> value): shown with
            their change, never tested.
        same_board: every run measured the same board: a difference of energy is then judged
            against the random parts of the runs' bounds (the sensor's systematic error cancels),
            else against their totals.
    """
    n = len(labels)
    _check_request(labels, windows, figures, alpha, min_change_pct)
    channels = list(channels) or [None] * n
    kinds = list(kinds) or [{}] * n
    verdicts = _Verdicts(alpha, min_change_pct, same_board)
    only_in: dict[str, list[str]] = {}
    rows = [
        row
        for figure in figures
        for row in _figure_rows(figure, labels, windows, channels, kinds, verdicts, only_in)
    ]
    rows += _derived_rows(list(derived) or [{}] * n, n)
    order = {k: i for i, k in enumerate(KINDS)}
    rows.sort(key=lambda r: order.get(r.kind, len(order)))  # stable: phases keep their order
    return Comparison(
        tuple(labels),
        tuple(rows),
        alpha=alpha,
        min_change_pct=min_change_pct,
        only_in={k: tuple(v) for k, v in only_in.items()},
    )


def _check_request(
    labels: Sequence[str],
    windows: Sequence[pd.DataFrame],
    figures: Sequence[str],
    alpha: float,
    min_change_pct: float,
) -> None:
    """Refuse a comparison that cannot be made, before any figure is read."""
    if len(labels) < 2 or len(windows) != len(labels):
        raise ValueError("compare at least two runs, one label each")
    check_thresholds(alpha, min_change_pct)
    unknown = [f for f in figures if f not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; valid: {', '.join(FIGURES)}")


TrialKey = tuple[str, str]


def _trials_on_channels(
    windows: Sequence[pd.DataFrame], figure: str, channels: Sequence[set[str] | None]
) -> list[dict[TrialKey, np.ndarray]]:
    """Per run, the figure's trials on the channels asked for (latency, under channel "", is
    always kept)."""
    trials = [trial_values(w, figure) for w in windows]
    for i, kept in enumerate(channels):
        if kept is not None:
            trials[i] = {k: v for k, v in trials[i].items() if k[1] == "" or k[1] in kept}
    return trials


def _note_partial(
    only_in: dict[str, list[str]], labels: Sequence[str], key: TrialKey, present: Sequence[bool]
) -> None:
    """Note a (phase, channel) that some runs lack, under the runs that have it (once each)."""
    if all(present):
        return
    where = ", ".join(label for label, here in zip(labels, present) if here)
    text = f"{key[0]} [{key[1]}]" if key[1] else key[0]
    if text not in only_in.setdefault(where, []):
        only_in[where].append(text)


def _kind_of(kinds: Sequence[Mapping[str, str]], phase: str) -> str:
    """The kind the first run that names the phase gives it (``phase`` when none does)."""
    return next((k[phase] for k in kinds if phase in k), "phase")


@dataclass(frozen=True)
class _Verdicts:
    """How every change of a comparison is judged: the thresholds, and whether the runs share a
    board (see ``judge``)."""

    alpha: float
    min_change_pct: float
    same_board: bool

    def judge(
        self,
        figure: str,
        reference: np.ndarray,
        other: np.ndarray,
        bounds: tuple[Bound | None, Bound | None],
    ) -> Change:
        return judge(figure, reference, other, self.alpha, self.min_change_pct, bounds, self.same_board)


def _figure_rows(
    figure: str,
    labels: Sequence[str],
    windows: Sequence[pd.DataFrame],
    channels: Sequence[set[str] | None],
    kinds: Sequence[Mapping[str, str]],
    verdicts: _Verdicts,
    only_in: dict[str, list[str]],
) -> list[Row]:
    """A row per (phase, channel) of one figure that the reference run and another run have, in
    the order they first appear; the ones some runs lack are noted in ``only_in``."""
    trials = _trials_on_channels(windows, figure, channels)
    bounds = [trial_bounds(w, figure) for w in windows]
    rows = []
    for key in dict.fromkeys(k for run in trials for k in run):
        present = [key in run for run in trials]
        _note_partial(only_in, labels, key, present)
        if present[0] and sum(present) >= 2:
            rows.append(_trial_row(figure, key, _kind_of(kinds, key[0]), trials, bounds, verdicts))
    return rows


def _trial_row(
    figure: str,
    key: TrialKey,
    kind: str,
    trials: Sequence[Mapping[TrialKey, np.ndarray]],
    bounds: Sequence[Mapping[TrialKey, Bound]],
    verdicts: _Verdicts,
) -> Row:
    """One figure of one (phase, channel) in every run, each run's trials judged against the
    first run's (a run without them gets an empty cell)."""
    reference = trials[0][key]
    spreads: list[Spread | None] = []
    values: list[float] = []
    changes: list[Change | None] = []
    row_bounds: list[Bound | None] = []
    for i, run in enumerate(trials):
        if key not in run:
            spreads.append(None)
            values.append(math.nan)
            changes.append(None)
            row_bounds.append(None)
            continue
        spread = Spread.of(run[key])
        spreads.append(spread)
        values.append(spread.median)
        bound = bounds[i].get(key)
        row_bounds.append(bound)
        pair = (bounds[0].get(key), bound)
        changes.append(None if i == 0 else verdicts.judge(figure, reference, run[key], pair))
    return Row(
        kind,
        key[0],
        key[1],
        figure,
        FIGURES[figure][1],
        tuple(spreads),
        tuple(values),
        tuple(changes),
        tuple(row_bounds),
    )


def _derived_rows(derived: Sequence[Mapping[str, float]], n: int) -> list[Row]:
    """A row per figure derived from the reference run's medians (``table.column``), with each
    run's change against it, never tested."""
    rows = []
    for name in dict.fromkeys(k for d in derived for k in d):
        if name not in derived[0]:
            continue
        figures_of_runs = tuple(float(d.get(name, math.nan)) for d in derived)
        ref = figures_of_runs[0]
        changes = (None, *(_derived_change(v, ref) for v in figures_of_runs[1:]))
        rows.append(
            Row(
                "derived",
                name,
                "",
                name.rpartition(".")[2],
                _unit(name),
                (None,) * n,
                figures_of_runs,
                changes,
            )
        )
    return rows


def _derived_change(value: float, reference: float) -> Change | None:
    if math.isfinite(value) and math.isfinite(reference) and reference != 0:
        return Change(value / reference, None, False, "not tested: derived from medians")
    return None


def _unit(column: str) -> str:
    for suffix, unit in (("_per_s", "/s"), ("_pct", "%"), ("_percent", "%"), ("_us", "µs")):
        if column.endswith(suffix):
            return unit
    for suffix, unit in (("_s", "s"), ("_j", "J"), ("_w", "W")):
        if column.endswith(suffix):
            return unit
    return ""
