"""Each segment's measured energy split among the requests active in it, and what is left idle.

The work model (docs/serving.md): in a segment, a request in prefill weighs its prompt tokens
times ``prefill_weight``, one in decode weighs one (one token per step per request), one still
queued nothing. A segment's energy goes to its requests in proportion to their weights; where
every active request is queued it is split evenly among them; where none is active it is idle
energy, reported apart. So the requests' energy plus the idle energy is every segment's energy,
exactly.

Bounds: a request's share of the sensor's systematic error adds up linearly (the same offset in
every segment); the random parts of its segments add in quadrature, ``sqrt(sum((f * R)**2))``.
Why that holds although neighbouring segments share an edge: a segment's random error is its two
edges' (and, for power samples, its inside's), independent, and an edge shared by two segments
enters both with opposite signs, so the request's error at an edge is its change of share there
times the edge's error. Shares are never negative, so ``(f_a - f_b)**2 <= f_a**2 + f_b**2``: each
edge's term is at most what the segments' own bounds give it (tests/serving/test_attribution.py
checks the coverage where it is tightest, a share that jumps at every edge).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .timeline import RequestSpan


@dataclass(frozen=True)
class Segments:
    """The measured segments, in time order, one value per segment. Units: s, J.

    Args:
        starts_s, ends_s: the segment's window.
        energy_j: its energy (summed over the primary channels).
        random_j, systematic_j: the 95 % parts of its bound.
        dynamic_j: its energy above the idle baseline (NaN without a baseline).
        baseline_j: the baseline's own bound over the segment (a systematic part of the
            dynamic energy).
    """

    starts_s: np.ndarray
    ends_s: np.ndarray
    energy_j: np.ndarray
    random_j: np.ndarray
    systematic_j: np.ndarray
    dynamic_j: np.ndarray
    baseline_j: np.ndarray

    def __len__(self) -> int:
        return len(self.starts_s)


@dataclass(frozen=True)
class RequestEnergy:
    """One request's attributed energy. Units: J.

    Args:
        energy_j: its share of every segment it was active in.
        energy_bound_j: the 95 % bound of ``energy_j``.
        prefill_energy_j: the part before its first token (queued and prefill).
        decode_energy_j: the part from its first token on.
        dynamic_energy_j: its share of the energy above the idle baseline (NaN without one).
        dynamic_energy_bound_j: the 95 % bound of ``dynamic_energy_j``.
    """

    energy_j: float
    energy_bound_j: float
    prefill_energy_j: float
    decode_energy_j: float
    dynamic_energy_j: float
    dynamic_energy_bound_j: float


@dataclass(frozen=True)
class Attribution:
    """The requests' energy (in the spans' order) and the idle energy. Units: J.

    Args:
        requests: per request.
        idle_energy_j, idle_bound_j: the segments no request was active in.
        segments_energy_j: every segment's energy together (the attributed plus the idle).
        shares: per (request, segment) pair, ``(request index, segment index, share, before
            its first token)`` as arrays: what the report's stacked power is drawn from.
    """

    requests: tuple[RequestEnergy, ...]
    idle_energy_j: float
    idle_bound_j: float
    segments_energy_j: float
    shares: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

    @property
    def attributed_energy_j(self) -> float:
        return float(sum(r.energy_j for r in self.requests))


def _memberships(
    spans: Sequence[RequestSpan], mid: np.ndarray, prefill_weight: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (request, segment it is active in): the request, the segment, its weight, and
    whether it was before its first token. A request is in a segment if the midpoint lies in
    its span."""
    req, seg, weight, early = [], [], [], []
    for i, s in enumerate(spans):
        a, b, c, d = np.searchsorted(mid, [s.sent_s, s.prefill_s, s.first_token_s, s.end_s], side="left")
        if not math.isfinite(s.first_token_s):  # no token: queued until its end
            b = c = d
        prompt = s.prompt_tokens if math.isfinite(s.prompt_tokens) and s.prompt_tokens > 0 else 1.0
        for lo, hi, w, before in (
            (a, b, 0.0, True),
            (b, c, prefill_weight * prompt, True),
            (c, d, 1.0, False),
        ):
            if hi > lo:
                req.append(np.full(hi - lo, i))
                seg.append(np.arange(lo, hi))
                weight.append(np.full(hi - lo, w))
                early.append(np.full(hi - lo, before))
    if not req:
        empty = np.zeros(0, dtype=int)
        return empty, empty, np.zeros(0), np.zeros(0, dtype=bool)
    return np.concatenate(req), np.concatenate(seg), np.concatenate(weight), np.concatenate(early)


def attribute(spans: Sequence[RequestSpan], segments: Segments, prefill_weight: float = 1.0) -> Attribution:
    """Split every segment's energy among the requests active in it (module docstring)."""
    n, m = len(spans), len(segments)
    mid = (segments.starts_s + segments.ends_s) / 2.0
    req, seg, weight, early = _memberships(spans, mid, prefill_weight)
    total = np.bincount(seg, weights=weight, minlength=m)
    count = np.bincount(seg, minlength=m)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total[seg] > 0, weight / total[seg], 1.0 / np.maximum(count[seg], 1))

    def per_request(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        pick = np.ones(len(seg), dtype=bool) if mask is None else mask
        # a share of 0 takes nothing, not even a segment's unknown (NaN) energy
        taken = np.where(share > 0, share * values[seg], 0.0)
        return np.bincount(req[pick], weights=taken[pick], minlength=n)

    energy = per_request(segments.energy_j)
    squared = np.where(share > 0, (share * segments.random_j[seg]) ** 2, 0.0)
    random = np.sqrt(np.bincount(req, weights=squared, minlength=n))
    systematic = per_request(segments.systematic_j)
    baseline = per_request(segments.baseline_j)
    requests = tuple(
        RequestEnergy(
            energy_j=float(energy[i]),
            energy_bound_j=math.hypot(random[i], systematic[i]),
            prefill_energy_j=float(pre),
            decode_energy_j=float(post),
            dynamic_energy_j=float(dyn),
            dynamic_energy_bound_j=math.sqrt(random[i] ** 2 + systematic[i] ** 2 + baseline[i] ** 2),
        )
        for i, (pre, post, dyn) in enumerate(
            zip(
                per_request(segments.energy_j, early),
                per_request(segments.energy_j, ~early),
                per_request(segments.dynamic_j),
            )
        )
    )
    idle = count == 0
    idle_random = math.sqrt(float(np.sum(segments.random_j[idle] ** 2)))
    return Attribution(
        requests=requests,
        idle_energy_j=float(np.sum(segments.energy_j[idle])),
        idle_bound_j=math.hypot(idle_random, float(np.sum(segments.systematic_j[idle]))),
        segments_energy_j=float(np.sum(segments.energy_j)),
        shares=(req, seg, share, early),
    )
