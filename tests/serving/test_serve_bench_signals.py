"""serve-bench on a bad day that takes a real process (Ctrl-C) or the fake NVML's clock (a power
profile known in advance): slow, each one run of a few seconds."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

import energyframe as ef
from energyframe.serving import read_requests
from tests.conftest import gpu, write_power_csv
from tests.serving.server import FakeServer
from tests.serving.test_serve_bench import model_energy

pytestmark = pytest.mark.slow


def wait_for(condition, what, limit_s=60.0):
    """Poll until ``condition()``; the limit only keeps a broken test from hanging."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_ctrl_c_keeps_the_finished_requests_and_saves_the_run_incomplete(tmp_path):
    lines = [{"prompt": f"quick {i} @tokens=3", "id": f"q{i}", "arrival_s": 0.0} for i in range(3)]
    lines += [{"prompt": "stuck @fault=stall", "id": f"s{i}", "arrival_s": 0.0} for i in range(2)]
    lines.append({"prompt": "later", "id": "later", "arrival_s": 60.0})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in lines))
    csv = write_power_csv(tmp_path / "power.csv", 100.0, period_s=0.01, duration_s=2.0)
    out = tmp_path / "run"
    with FakeServer() as server:
        argv = [
            sys.executable,
            "-m",
            "energyframe",
            "serve-bench",
            "--url",
            server.url,
            "--prompts",
            str(prompts),
        ]
        argv += ["--power", f"replay:file={csv},loop=true", "--out", str(out), "--idle", "0"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(
                lambda: len(server.received) == 5 and server.answered == 3,
                "five requests sent, three answered",
            )
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert (
        f"Error: interrupted by SIGINT after 5 of 6 requests were sent; the run is saved in {out}" in stderr
    )
    run = ef.load_run(out)
    assert (
        run.status == "incomplete" and run.reason == "interrupted by SIGINT after 5 of 6 requests were sent"
    )
    frame = read_requests(out)
    assert dict(zip(frame["request_id"], frame["status"])) == {
        "q0": "ok", "q1": "ok", "q2": "ok", "s0": "cancelled", "s1": "cancelled"
    }  # fmt: skip
    assert run.derived_table("serving").rows[0]["unsent"] == 1
    assert run.derived_table("conservation").rows[0]["within_bound"] is True
    assert frame.loc[frame["status"] == "cancelled", "energy_j"].gt(0).all()  # they held the server too
    shown = subprocess.run(
        [sys.executable, "-m", "energyframe", "show", str(out)], capture_output=True, text=True
    )
    assert shown.returncode == 0 and "run incomplete: interrupted by SIGINT after 5 of 6" in " ".join(
        shown.stdout.split()
    )


def test_the_power_a_prefill_draws_goes_to_the_request_in_prefill(tmp_path, fake_nvml):
    """The fake GPU draws 100 W, and 400 W more during the last 0.3 s before request x's first
    token, while two other requests decode. x's prompt weighs 100 tokens against their one
    each, so x gets 100/102 of that extra; and every request gets what the work model gives it
    of the true power over the run's own segments, within its bound."""
    t0 = time.time()
    first_at = t0 + 9.0  # the sources start and the load begins well before (a few seconds)
    fake_nvml(gpus=[gpu(profile=[[0.0, 100.0], [first_at - 0.3 - t0, 500.0], [first_at - t0, 100.0]])])
    filler = " ".join(["w"] * 97)
    lines = [{"prompt": f"{filler} @first_at={first_at!r} @gap=0.3 @tokens=3", "id": "x"}]
    lines += [{"prompt": f"d @gap=0.05 @until={first_at + 0.8!r}", "id": f"d{i}"} for i in range(2)]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in lines))
    out = tmp_path / "run"
    with FakeServer(ttft_s=0.05) as server:
        ef.serving.serve_bench(
            server.url, str(prompts), rate=float("inf"), power=["nvml"], out=out, idle_s=0.5, reporters=[]
        )
    frame = read_requests(out).set_index("request_id", drop=False)
    x = frame.loc["x"]
    assert x["prompt_tokens"] == 100 and x["sent_s"] < first_at - 0.5  # the test's premise
    assert x["prefill_s"] == pytest.approx(first_at - 0.3, abs=0.05)
    # x's prefill window is the extra power's, give or take the server's and the client's timing
    # (a few ms; 60 ms allowed): without its prompt's weight it would get a third of it
    assert x["prefill_energy_j"] >= 400.0 * (0.3 - 0.06) * 100 / 102

    def profile_w(t):
        return np.where((t >= first_at - 0.3) & (t < first_at), 500.0, 100.0)

    expected = model_energy(frame, profile_w)
    for (rid, row), truth in zip(frame.iterrows(), expected):
        assert abs(row["energy_j"] - truth) <= row["energy_bound_j"], (
            rid,
            row["energy_j"],
            truth,
            row["energy_bound_j"],
        )
    windows = pd.read_csv(out / "windows.csv")
    span = windows[(windows["phase"] == "serve") & (windows["channel"] == "gpu0")].iloc[0]
    conservation = ef.load_run(out).derived_table("conservation").rows[0]
    assert conservation["measured_energy_j"] == pytest.approx(span["energy_j"])
    # each segment's edges estimated on their own (the counter's ticks, the fused samples): they
    # still add up to the load's window
    assert conservation["within_bound"] is True
