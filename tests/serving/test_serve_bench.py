"""``energyframe serve-bench`` end to end: a real local server (tests/serving/server.py), the
``replay`` power source, the real measurement, the saved run and every command that reads it."""

import base64
import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.serving import read_requests
from energyframe.serving.summary import REQUEST_COLUMNS, conservation_sentence
from tests.conftest import write_power_csv
from tests.serving.server import FakeServer

WATTS = 100.0


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def power(tmp_path_factory):
    """Constant power, played back in a loop: every window's energy is 100 W times its length."""
    path = tmp_path_factory.mktemp("power") / "power.csv"
    return f"replay:file={write_power_csv(path, WATTS, period_s=0.01, duration_s=2.0)},loop=true"


@pytest.fixture(scope="module")
def server():
    with FakeServer(ttft_s=0.03, gap_s=0.004) as s:
        yield s


def bench(server, power, out, *more):
    return invoke("serve-bench", "--url", server.url, "--power", power, "--out", out, "--idle", "0.2", *more)


@pytest.fixture(scope="module")
def saved(server, power, tmp_path_factory):
    """One run of 10 synthetic requests at 40 per second."""
    out = tmp_path_factory.mktemp("runs") / "a"
    result = bench(
        server,
        power,
        out,
        "--prompts",
        "synthetic:prompt_tokens=16,output_tokens=12",
        "--requests",
        10,
        "--rate",
        40,
    )
    assert result.exit_code == 0, result.output
    return out, result.output


def test_the_run_prints_its_summary_and_conservation_and_writes_documented_files(saved):
    from tests.test_docs import check_run

    out, output = saved
    assert "per request (ok requests; energy with its 95 % bound)" in output
    shown = " ".join(output.split())
    assert "conservation: requests + idle against the load's window" in shown
    files = check_run(out)
    assert {"requests.csv", "tokens.csv", "serving.csv", "conservation.csv", "windows.csv"} <= files
    frame = read_requests(out)
    assert list(frame.columns) == REQUEST_COLUMNS
    assert len(frame) == 10 and set(frame["status"]) == {"ok"} and set(frame["output_tokens"]) == {12}
    tokens = pd.read_csv(out / "tokens.csv")
    assert len(tokens) == 120
    first = tokens.groupby("request_id")["time_s"].min()
    assert np.allclose(
        first.loc[frame["request_id"]].to_numpy(), frame["first_token_s"].to_numpy(), atol=1e-6
    )


def test_attributed_plus_idle_is_the_loads_measured_energy(saved):
    out, _ = saved
    windows = pd.read_csv(out / "windows.csv")
    span = windows[windows["phase"] == "serve"].iloc[0]
    frame = read_requests(out)
    row = ef.load_run(out).derived_table("conservation").rows[0]
    assert row["within_bound"] is True
    assert frame["energy_j"].sum() + row["idle_energy_j"] == pytest.approx(span["energy_j"], rel=1e-9)
    assert span["energy_j"] == pytest.approx(WATTS * span["duration_s"], rel=1e-6)
    idle = windows[windows["phase"] == "serve.idle"]["energy_j"].sum()
    assert row["idle_energy_j"] == pytest.approx(idle, rel=1e-9)


def model_energy(frame, watts, dt=2e-5, prefill_weight=1.0):
    """The work model of docs/serving.md computed the plain way: on a fine grid of instants,
    each request's state read from requests.csv, the power (W, or a function of the Unix time)
    split by the weights."""
    t = np.arange(frame["sent_s"].min(), frame["end_s"].max(), dt) + dt / 2
    power = watts(t) if callable(watts) else watts
    weights = []
    active = []
    for r in frame.itertuples():
        first = r.first_token_s if math.isfinite(r.first_token_s) else r.end_s
        queued = (t >= r.sent_s) & (t < r.prefill_s)
        prefill = (t >= r.prefill_s) & (t < first)
        decode = (t >= first) & (t < r.end_s)
        weights.append(np.where(prefill, prefill_weight * r.prompt_tokens, np.where(decode, 1.0, 0.0)))
        active.append(queued | prefill | decode)
    weights, active = np.array(weights), np.array(active)
    total, count = weights.sum(axis=0), active.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, weights / total, np.where(active, 1.0 / np.maximum(count, 1), 0.0))
    return (share * power * dt).sum(axis=1)


def test_each_requests_energy_is_the_work_models_share_of_the_power(saved):
    out, _ = saved
    frame = read_requests(out)
    expected = model_energy(frame, WATTS)
    assert frame["energy_j"].to_numpy() == pytest.approx(expected, abs=0.02)
    assert (frame["prefill_energy_j"] + frame["decode_energy_j"]).to_numpy() == pytest.approx(
        frame["energy_j"].to_numpy()
    )
    assert (frame["energy_bound_j"] == 0).all()  # a constant replayed power channel: exact
    assert frame["dynamic_energy_j"].to_numpy() == pytest.approx(0.0, abs=1e-6)  # the baseline is 100 W too


def test_show_compare_report_and_load_runs_read_the_run(saved, server, power, tmp_path):
    out, _ = saved
    shown = invoke("show", out)
    assert (
        shown.exit_code == 0
        and "energy_per_request_median_j" in shown.output
        and "within_bound" in shown.output
    )
    again = tmp_path / "b"
    assert (
        bench(
            server,
            power,
            again,
            "--prompts",
            "synthetic:prompt_tokens=16,output_tokens=12",
            "--requests",
            4,
            "--concurrency",
            2,
        ).exit_code
        == 0
    )
    compared = invoke("compare", out, again, "--table", "csv")
    assert compared.exit_code == 0 and "serving.energy_per_request_median_j" in compared.output
    page = tmp_path / "report.html"
    reported = invoke("report", out, "--out", page)
    assert reported.exit_code == 0, reported.output
    html = page.read_text()
    assert "Serving: each request&#39;s energy against its tokens" in html
    assert "Serving: measured power, each request&#39;s share stacked on it" in html
    table = ef.load_runs(out.parent)
    assert {"serve", "serve.busy"} <= set(table["phase"]) <= {"serve", "serve.busy", "serve.idle"}


def values(data):
    """A plotly figure's array as numbers (plotly may keep it as base64 typed-array data)."""
    if isinstance(data, dict) and "bdata" in data:
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
    return np.asarray(data, dtype=float)


def test_the_report_figures_are_the_runs_attribution(saved):
    from energyframe.results.rundir import load
    from energyframe.serving.workload import ServeBenchWorkload

    out, _ = saved
    run = load(out)
    assert run.workload is ServeBenchWorkload
    figures = {f.title: f for f in run.workload_figures()}
    stacked = figures["Serving: measured power, each request's share stacked on it"].figure
    traces = [t for t in stacked["data"] if t.get("stackgroup") == "requests"]
    assert len(traces) == 11  # ten requests and the idle band
    # the stacked power integrates to the load's energy: each band's steps times their lengths
    total = sum(float(np.sum(values(t["y"])[::2] * np.diff(values(t["x"]))[::2])) for t in traces)
    windows = run.result.windows
    assert total == pytest.approx(windows[windows["phase"] == "serve"]["energy_j"].iloc[0], rel=1e-6)
    scatter = figures["Serving: each request's energy against its tokens (95 % bounds)"].figure
    assert sorted(values(scatter["data"][0]["y"])) == pytest.approx(sorted(read_requests(out)["energy_j"]))


def test_faults_give_each_request_its_status_and_the_run_stays_valid(server, power, tmp_path):
    lines = [{"prompt": f"ok {i} @tokens=5", "id": f"ok{i}"} for i in range(4)]
    lines += [
        {"prompt": f"bad @fault={fault}", "id": fault}
        for fault in ("http500", "end", "malformed", "stall", "close")
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    out = tmp_path / "run"
    result = bench(server, power, out, "--prompts", path, "--concurrency", 9, "--request-timeout", 0.5)
    assert result.exit_code == 0, result.output
    statuses = dict(zip(read_requests(out)["request_id"], read_requests(out)["status"]))
    assert statuses == {
        **{f"ok{i}": "ok" for i in range(4)},
        "http500": "http_error",
        "end": "truncated",
        "malformed": "malformed",
        "stall": "timeout",
        "close": "truncated",
    }
    run = ef.load_run(out)
    assert run.complete
    assert any(
        w.startswith("5 of 9 requests failed (truncated=2, http_error=1, malformed=1, timeout=1)")
        for w in run.warnings
    )
    summary = run.derived_table("serving").rows[0]
    assert (summary["requests"], summary["ok"], summary["failed"]) == (9, 4, 5)
    assert run.derived_table("conservation").rows[0]["within_bound"] is True


def test_a_server_that_refuses_every_request_fails_the_run_with_a_hint(power, tmp_path):
    with FakeServer(refuse_stream_options=True) as s:
        result = bench(
            s,
            power,
            tmp_path / "run",
            "--prompts",
            "synthetic:prompt_tokens=4,output_tokens=2",
            "--requests",
            2,
            "--rate",
            "inf",
        )
    assert result.exit_code == 1
    assert (
        "Error: every request failed (http_error=2) (the server refuses stream_options: give --no-stream-usage); "
        "first: r00000: HTTP 422: "
    ) in result.output
    assert ef.load_run(tmp_path / "run").complete
    with FakeServer(refuse_stream_options=True, usage="never", done=False) as s:
        fine = bench(
            s,
            power,
            tmp_path / "again",
            "--prompts",
            "synthetic:prompt_tokens=4,output_tokens=2",
            "--requests",
            2,
            "--rate",
            "inf",
            "--no-stream-usage",
        )
    assert fine.exit_code == 0, fine.output
    assert set(read_requests(tmp_path / "again")["usage_reported"]) == {False}
    assert "the server reported no usage for 2 request(s)" in fine.output


def test_no_server_is_an_error_before_anything_is_measured(power, tmp_path):
    with FakeServer() as s:
        url = s.url
    result = bench(
        type("S", (), {"url": url}),
        power,
        tmp_path / "run",
        "--prompts",
        "synthetic:prompt_tokens=4",
        "--requests",
        1,
        "--rate",
        1,
    )
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: no server answers at {url} (")
    assert result.output.rstrip().endswith("start it first, or check --url")
    assert not (tmp_path / "run").exists()


def test_a_server_that_goes_down_mid_load(power, tmp_path):
    lines = [{"prompt": "a @tokens=3", "arrival_s": 0.0}, {"prompt": "b @tokens=3", "arrival_s": 0.0}]
    lines += [{"prompt": f"late {i}", "arrival_s": 1.5} for i in range(2)]  # well after the first two end
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    with FakeServer(down_after=2) as s:  # down once the first two were answered
        result = bench(s, power, tmp_path / "run", "--prompts", path)
    assert result.exit_code == 0, result.output
    assert list(read_requests(tmp_path / "run")["status"]) == ["ok", "ok", "connect_error", "connect_error"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--rate", "0"), "Invalid value for '--rate': must be above 0"),
        ((), "Error: give --rate R (Poisson arrivals, R per second), --concurrency N, or both"),
        (("--rate", "1", "--extra-body", "[1]"), "Error: --extra-body '[1]': give a JSON object"),
        (
            ("--rate", "1", "--url", "127.0.0.1:8000"),
            "Error: --url '127.0.0.1:8000': give the server's base URL",
        ),
    ],
)
def test_usage_errors_exit_2_before_anything_starts(server, power, tmp_path, args, message):
    result = invoke(
        "serve-bench",
        "--url",
        server.url,
        "--prompts",
        "synthetic:prompt_tokens=4",
        "--requests",
        1,
        "--power",
        power,
        "--out",
        tmp_path / "run",
        *args,
    )
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "run").exists()


def test_timing_only(server, tmp_path):
    out = tmp_path / "run"
    result = invoke(
        "serve-bench",
        "--url",
        server.url,
        "--prompts",
        "synthetic:prompt_tokens=4,output_tokens=3",
        "--requests",
        3,
        "--rate",
        "inf",
        "--power",
        "none",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    frame = read_requests(out)
    assert set(frame["status"]) == {"ok"} and frame["energy_j"].isna().all() and (frame["ttft_s"] > 0).all()
    row = ef.load_run(out).derived_table("conservation").rows[0]
    assert row["within_bound"] is None and row["measured_energy_j"] is None  # NaN in run.json is null
    assert conservation_sentence(row) == "conservation: not checked (no energy measured over the load)"


def test_without_httpx_the_command_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "httpx", None)  # as in an environment without it
    result = invoke(
        "serve-bench",
        "--url",
        "http://127.0.0.1:9/v1",
        "--prompts",
        "synthetic:prompt_tokens=4",
        "--requests",
        1,
        "--rate",
        1,
        "--out",
        tmp_path / "run",
    )
    assert result.exit_code == 2
    assert result.output == "Error: energyframe serve-bench needs httpx: pip install 'energyframe[serve]'\n"


def test_an_error_after_the_load_still_saves_the_run_incomplete(server, power, tmp_path, monkeypatch):
    from energyframe.serving import run

    def broken(m, workload, load):
        raise RuntimeError("a bug while the windows were recorded")

    monkeypatch.setattr(run, "record_segments", broken)
    with pytest.raises(RuntimeError, match="a bug while the windows were recorded"):
        run.serve_bench(
            server.url,
            "synthetic:prompt_tokens=4,output_tokens=2",
            requests=2,
            rate=math.inf,
            power=[power],
            out=tmp_path / "run",
            idle_s=0.0,
            reporters=[],
        )
    saved = ef.load_run(tmp_path / "run")
    assert saved.status == "incomplete"
    assert saved.reason == "RuntimeError after the load: a bug while the windows were recorded"


def test_a_long_loads_segments_are_drawn_on_bins_that_keep_their_energy():
    from energyframe.serving.figures import rebinned

    rng = np.random.default_rng(1)
    ends = np.cumsum(rng.uniform(0.001, 0.1, 5000))
    starts = np.concatenate([[0.0], ends[:-1]])
    power = rng.uniform(50, 700, 5000)
    a, b, p = rebinned(starts, ends, power, 200)
    assert len(p) == 200 and a[0] == 0.0 and b[-1] == pytest.approx(ends[-1])
    assert np.sum(p * (b - a)) == pytest.approx(np.sum(power * (ends - starts)), rel=1e-9)
    few = power[:10]
    assert rebinned(starts[:10], ends[:10], few, 200)[2] is few  # few segments: drawn as they are


@pytest.mark.parametrize("option", ["--idle", "--request-timeout", "--prefill-weight"])
def test_a_number_that_is_not_finite_is_refused_by_name(option, tmp_path):
    # click's FloatRange let "nan" through its bounds (NaN compares false with everything)
    done = invoke("serve-bench", "--url", "http://127.0.0.1:9/v1", "--out", tmp_path / "run", option, "nan")
    assert done.exit_code == 2
    assert f"Invalid value for '{option}': must be a finite number" in done.output
    assert not (tmp_path / "run").exists()
