"""The work model and the split of each segment's energy (energyframe/serving/timeline.py and
attribution.py), on synthetic timelines and segment energies with known answers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from energyframe.serving.attribution import Segments, attribute
from energyframe.serving.client import OK, RequestRecord
from energyframe.serving.timeline import RequestSpan, busy, request_spans, segment_edges


def record(rid, sent, tokens, usage=None):
    """A request sent at ``sent`` whose chunks came at ``tokens``."""
    end = tokens[-1] if tokens else sent + 1.0
    return RequestRecord(
        rid, OK, sent, sent, sent, tokens[0] if tokens else math.nan, end, tuple(tokens), output_tokens=usage
    )


def segments_under(spans, power_w, random_j=0.0, systematic_j=0.0):
    """The segments the spans cut, each with the energy of ``power_w(t0, t1)``."""
    edges = segment_edges(spans)
    starts, ends = edges[:-1], edges[1:]
    energy = np.array([power_w(a, b) for a, b in zip(starts, ends)])
    n = len(starts)
    return Segments(
        starts,
        ends,
        energy,
        np.full(n, random_j),
        np.full(n, systematic_j),
        energy - 50.0 * (ends - starts),
        np.zeros(n),
    )


def constant(watts):
    return lambda a, b: watts * (b - a)


def test_the_prefill_is_the_step_before_the_first_token_and_the_rest_of_the_wait_is_queued():
    r = record("a", 0.0, [1.0, 1.1, 1.2, 1.3])  # 0.1 s per token after the first
    (span,) = request_spans([r], [20])
    assert (span.sent_s, span.prefill_s, span.first_token_s, span.end_s) == pytest.approx(
        (0.0, 0.9, 1.0, 1.3)
    )
    short = record("b", 0.0, [0.5])  # one token: the run's median step
    no_token = record("c", 0.0, [])
    spans = request_spans([r, short, no_token], [20, 20, 20])
    assert spans[1].prefill_s == pytest.approx(0.4)
    assert math.isnan(spans[2].first_token_s) and spans[2].prefill_s == spans[2].end_s == 1.0


def test_identical_requests_at_constant_power_get_equal_shares_and_everything_is_conserved():
    spans = [RequestSpan(f"r{i}", 0.0, 0.4, 0.5, 2.0, 100) for i in range(4)]
    spans.append(RequestSpan("late", 3.0, 3.1, 3.2, 4.0, 100))  # an idle second before it
    att = attribute(spans, segments_under(spans, constant(200.0)))
    energies = [r.energy_j for r in att.requests]
    assert energies[:4] == pytest.approx([100.0] * 4, rel=1e-12)  # 2 s x 200 W over 4
    assert energies[4] == pytest.approx(200.0)
    assert att.idle_energy_j == pytest.approx(200.0)
    assert att.attributed_energy_j + att.idle_energy_j == pytest.approx(800.0, rel=1e-12)
    first = att.requests[0]
    assert first.prefill_energy_j == pytest.approx(25.0) and first.decode_energy_j == pytest.approx(75.0)
    assert first.dynamic_energy_j == pytest.approx(100.0 - 50.0 * 2.0 / 4)


def test_extra_power_while_one_request_is_in_prefill_goes_to_it_by_its_prompt_tokens():
    decoding = [RequestSpan(f"d{i}", 0.0, 0.0, 0.0, 3.0, 10) for i in range(3)]
    prefilling = RequestSpan("p", 0.5, 1.0, 1.2, 3.0, 297)  # queued 0.5-1.0, prefill 1.0-1.2

    def profile(a, b):  # 100 W, and 400 W more during the prefill
        extra = max(0.0, min(b, 1.2) - max(a, 1.0))
        return 100.0 * (b - a) + 400.0 * extra

    spans = [*decoding, prefilling]
    att = attribute(spans, segments_under(spans, profile))
    p = att.requests[3]
    # in the prefill segment (0.2 s, 100 J) the prompt weighs 297 against 1 per decoding request
    assert p.prefill_energy_j == pytest.approx(100.0 * 297 / 300)
    assert p.decode_energy_j == pytest.approx(100.0 * 1.8 / 4)
    # with the prompt weighed like one token, the prefill's extra is shared evenly
    even = attribute(spans, segments_under(spans, profile), prefill_weight=1 / 297)
    assert even.requests[3].prefill_energy_j == pytest.approx(100.0 / 4)


def test_queued_requests_alone_share_evenly_and_an_unknown_energy_stays_unknown():
    spans = [RequestSpan("a", 0.0, 1.0, 1.5, 2.0, 10), RequestSpan("b", 0.0, 2.0, math.nan, 2.0, 10)]
    segs = segments_under(spans, constant(100.0))
    att = attribute(spans, segs)
    # 0-1: both queued (50 J each); 1-1.5: a in prefill (all of it); 1.5-2: a decodes, b queued
    assert [r.energy_j for r in att.requests] == pytest.approx([150.0, 50.0])
    nan = Segments(segs.starts_s, segs.ends_s, np.where(segs.starts_s == 1.5, np.nan, segs.energy_j), *(
        getattr(segs, f) for f in ("random_j", "systematic_j", "dynamic_j", "baseline_j")))  # fmt: skip
    att = attribute(spans, nan)
    assert math.isnan(att.requests[0].energy_j)
    assert att.requests[1].energy_j == pytest.approx(50.0)  # its share of the unknown segment is 0


def test_busy_says_which_segments_have_a_request():
    spans = [RequestSpan("a", 0.0, 0.5, 1.0, 2.0, 1), RequestSpan("b", 3.0, 3.0, 3.5, 4.0, 1)]
    edges = segment_edges(spans)
    assert list(edges) == [0.0, 0.5, 1.0, 2.0, 3.0, 3.5, 4.0]
    assert list(busy(spans, edges[:-1], edges[1:])) == [True, True, True, False, True, True]


timelines = st.lists(
    st.tuples(
        st.floats(0, 10),
        st.floats(0, 2),
        st.floats(0, 0.5),
        st.floats(0, 5),
        st.integers(1, 4000),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(timelines, st.floats(0, 3))
def test_conservation_is_exact_for_any_timeline(timeline, prefill_weight):
    spans = []
    for i, (sent, queued, prefill, decode, tokens, got_token) in enumerate(timeline):
        first = sent + queued + prefill if got_token else math.nan
        end = sent + queued + prefill + decode
        spans.append(RequestSpan(f"r{i}", sent, sent + queued, first, end, tokens))
    if len(segment_edges(spans)) < 2:
        return
    rng = np.random.default_rng(len(timeline))
    segs = segments_under(spans, lambda a, b: (b - a) * float(rng.uniform(50, 700)))
    att = attribute(spans, segs, prefill_weight)
    total = float(np.sum(segs.energy_j))
    assert att.attributed_energy_j + att.idle_energy_j == pytest.approx(total, rel=1e-9, abs=1e-9)
    for r in att.requests:
        assert r.prefill_energy_j + r.decode_energy_j == pytest.approx(r.energy_j, rel=1e-9, abs=1e-9)
        assert r.energy_j >= -1e-12


def test_a_requests_bound_holds_95_percent_of_edge_errors_where_it_is_tightest():
    """Each edge between segments has an independent error, entering the segments either side
    with opposite signs; a segment's stated random bound is 1.96 times its two edges' errors in
    quadrature. Where a request's share jumps between 1 and almost 0 at every edge, the bound's
    quadrature over segments is just wide enough: 95 % inside, and a narrower one would not be."""
    rng = np.random.default_rng(0)
    n = 40
    edges = np.arange(n + 1, dtype=float)
    sigma = rng.uniform(0.05, 1.0, n + 1)  # per edge, J
    random_j = 1.96 * np.sqrt(sigma[:-1] ** 2 + sigma[1:] ** 2)
    # a decodes throughout; in every odd segment another request prefills 99 prompt tokens
    spans = [RequestSpan("a", 0.0, 0.0, 0.0, float(n), 1)]
    spans += [
        RequestSpan(f"b{k}", float(k), float(k), float(k + 1), float(k + 1), 99) for k in range(1, n, 2)
    ]
    segs = Segments(
        edges[:-1], edges[1:], np.full(n, 10.0), random_j, np.zeros(n), np.full(n, 10.0), np.zeros(n)
    )
    att = attribute(spans, segs)
    share = np.where(np.arange(n) % 2 == 0, 1.0, 0.01)
    assert att.requests[0].energy_j == pytest.approx(10.0 * share.sum())
    errors = rng.normal(0.0, sigma, size=(20000, n + 1))
    request_errors = (errors[:, 1:] - errors[:, :-1]) @ share
    bound = att.requests[0].energy_bound_j
    assert bound == pytest.approx(math.sqrt(np.sum((share * random_j) ** 2)))
    assert np.mean(np.abs(request_errors) <= bound) >= 0.94
    assert np.mean(np.abs(request_errors) <= 0.8 * bound) < 0.95
