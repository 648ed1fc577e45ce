"""Runs of several real processes on the CPU (gloo), as users launch them: torchrun (one machine,
and two simulated machines joined by a c10d rendezvous), srun's environment, and ``ef.measure``
in a script. Each rank replays its own constant power (``replay:file=p-{rank}.csv``), so every
rank's energy is known: power x the window's duration, and the total is their sum.

Failures: a rank raising in its step, a rank terminated by SIGTERM, and a rank that stops
answering (SIGSTOP) while rank 0 waits with a short timeout; in each, every rank ends, the run
is saved by rank 0 as incomplete with the failing rank named, and the windows measured before
are kept."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import write_power_csv

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

WATTS = {0: 100.0, 1: 50.0}
LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
SLURM = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")


@pytest.fixture
def place(tmp_path):
    """A folder with each rank's power file (60 s of constant power, every 10 ms)."""
    for rank, watts in WATTS.items():
        write_power_csv(tmp_path / f"p-{rank}.csv", watts, period_s=0.01, duration_s=60.0)
    return tmp_path


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER + SLURM}
    env.update(extra)
    return env


def torchrun(*args: str, cwd: Path, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", *args]
    return subprocess.run(command, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_energies(run: Path, ranks=(0, 1)) -> pd.DataFrame:
    """Every rank's windows carry its own known power; the total is their sum, per window (when
    every rank's part is there)."""
    w = pd.read_csv(run / "windows.csv", dtype={"channel": str, "flags": str, "host": str})
    for rank in ranks:
        mine = w[w["channel"] == f"rank{rank}.replay"]
        assert len(mine) and (mine["rank"] == rank).all()
        assert mine["energy_j"].to_numpy() == pytest.approx(WATTS[rank] * mine["duration_s"].to_numpy(), rel=1e-6)
    if len(ranks) < 2:
        return w
    total = w[w["channel"] == "total"].set_index(["phase", "trial"])["energy_j"]
    parts = w[w["channel"].str.endswith(".replay", na=False)].groupby(["phase", "trial"])["energy_j"].sum()
    assert len(total) and total.to_numpy() == pytest.approx(parts.loc[total.index].to_numpy(), rel=1e-12)
    return w


def test_torchrun_two_ranks_one_run_directory(place):
    done = torchrun(
        "--standalone", "--nproc-per-node", "2", "-m", "energyframe", "run",
        "--power", "replay:file=p-{rank}.csv", "--workload", "sleep:seconds=0.05", "--trials", "3",
        cwd=place,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (place / "runs").iterdir()  # rank 0 named the directory; no rank made another
    assert sorted(p.name for p in run.iterdir()) == ["run.json", "samples.parquet", "windows.csv"]
    w = check_energies(run)
    assert list(w["channel"][:3]) == ["rank0.replay", "rank1.replay", "total"]
    assert sorted(set(w["trial"])) == [0, 1, 2]
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["primary_channels"] == ["rank0.replay", "rank1.replay", "total"]
    d = meta["distributed"]
    assert (d["world_size"], d["backend"], d["launcher"], d["hosts"]) == (2, "gloo", "torchrun", [socket.gethostname()])
    assert [(r["rank"], r["local_rank"], r["devices"], r["status"]) for r in d["ranks"]] == [
        (0, 0, ["cuda:0"], "complete"),
        (1, 1, ["cuda:1"], "complete"),
    ]
    one = d["ranks"][1]
    assert one["shared_clock"] and one["clock_offset_s"] == 0.0  # one machine, one monotonic clock
    # one clock: the peer's stamp lies inside the round trip, so the estimate is within its half
    assert 0 < one["clock_offset_uncertainty_s"]
    assert abs(one["measured_clock_offset_s"]) <= one["clock_offset_uncertainty_s"] + 1e-9
    # rank 0 alone speaks: one table, one "saved in"
    assert done.stdout.count("saved in") == 1 and done.stdout.count("rank1.replay") == 1


SCRIPT = """
    import json, os, sys, time
    import torch.distributed as dist
    import energyframe as ef
    from energyframe.plugin import Channel, PowerSource, Quantity, Sample, Scope

    class NodeMeter(PowerSource):
        '''The whole machine at a constant 30 W (a wall meter's kind: one per machine).'''

        def start(self, context):
            self.last = time.monotonic()
            return [Channel("wall", Quantity.POWER, Scope.SYSTEM_WALL, 0.01)]

        def read(self):
            now, out = time.monotonic(), []
            while self.last + 0.01 <= now:
                self.last += 0.01
                out.append(Sample("wall", self.last, 30.0))
            return out

        def stop(self):
            pass

    dist.init_process_group("gloo")  # the user's own group: the measurement works beside it
    with ef.measure(power=["replay:file=p-{rank}.csv", NodeMeter("meter")], out=sys.argv[1]) as m:
        for _ in range(3):
            with m.window("step", iterations=2):
                time.sleep(0.05)
        dist.barrier()  # the user's collectives still work
    meta = m.result.meta
    line = json.dumps({"rank": dist.get_rank(), "windows": len(m.result.windows),
                       "distributed": meta.get("distributed", {}).get("run_dir", "whole")})
    sys.stdout.write(line + "\\n")  # one write: print writes the newline apart, and the ranks share stdout
    sys.stdout.flush()
    dist.destroy_process_group()
"""


def test_measure_in_a_torchrun_script(place):
    (place / "script.py").write_text(textwrap.dedent(SCRIPT))
    done = torchrun("--standalone", "--nproc-per-node", "2", "script.py", "run", cwd=place)
    assert done.returncode == 0, done.stderr[-3000:]
    said = sorted((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")), key=lambda d: d["rank"])
    # rank 0 has the whole run (2 ranks' replay, its meter, the total: 4 rows a window); rank 1 its part
    assert said == [{"rank": 0, "windows": 12, "distributed": "whole"}, {"rank": 1, "windows": 3, "distributed": "run"}]
    w = check_energies(place / "run")
    assert set(w["channel"]) == {"rank0.replay", "rank0.wall", "rank1.replay", "total"}
    assert w[w["channel"] == "rank0.wall"]["mean_power_w"].to_numpy() == pytest.approx(30.0)
    meta = json.loads((place / "run" / "run.json").read_text())
    assert "rank 1: power source 'meter' measures the whole machine: it runs in local rank 0 only" in meta["notes"]
    assert meta["distributed"]["total"]["of"] == ["rank0.replay", "rank1.replay"]  # the meter is not a GPU


NODE = """
    import os
    import energyframe.ranks.world
    energyframe.ranks.world.host_name = lambda: os.environ["FAKE_HOST"]  # a machine of its own
    from energyframe.cli import main
    main()
"""


def test_two_machines_joined_by_a_c10d_rendezvous(place):
    (place / "node.py").write_text(textwrap.dedent(NODE))
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for node in (0, 1):
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes",
            # calibrated steps, a time-based warm-up and guard bands: agreed between the machines
            "node.py", "run", "--power", "replay:file=p-{rank}.csv", "--workload", "cpu-matmul:sizes=32",
            "--trials", "2", "--min-window", "0.1", "--warmup-s", "0.3", "--guard", "0.2", "--out", "run",
        ]
        env = clean_env(FAKE_HOST=f"node-{'ab'[node]}")
        procs.append(subprocess.Popen(command, cwd=place, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _out, err in outputs]
    check_energies(place / "run")
    d = json.loads((place / "run" / "run.json").read_text())["distributed"]
    assert d["world_size"] == 2 and d["hosts"] == ["node-a", "node-b"]
    # one rank per machine: both are local rank 0, on GPU cuda:0 of their machine
    assert sorted((r["host"], r["local_rank"], r["devices"][0]) for r in d["ranks"]) == [
        ("node-a", 0, "cuda:0"),
        ("node-b", 0, "cuda:0"),
    ]
    w = pd.read_csv(place / "run" / "windows.csv", dtype={"host": str})
    hosts = {r["rank"]: r["host"] for r in d["ranks"]}
    for rank in (0, 1):
        assert set(w[w["rank"] == rank]["host"]) == {hosts[rank]}
    # both machines ran the same calibrated steps in every window
    parts = w[w["channel"] != "total"]
    assert (parts.groupby(["phase", "trial"])["iterations"].nunique() == 1).all()
    assert parts["iterations"].min() > 1


FAILING = """
    import os, signal, sys, time
    import energyframe as ef
    import torch.distributed  # the rank's join imports it; here, before the barrier below
    from energyframe.plugin import Phase, Workload

    # a barrier of files: every rank has made its imports before any joins, so that the join's
    # timeout (3 s in the silent-rank test) is spent on the join. On a host loaded by two test
    # suites at once, one rank's import of torch finished more than 3 s after the other's.
    RANK = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    WORLD = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    open(f"ready-{RANK}", "w").close()
    for _ in range(12000):  # looks every 10 ms; a bound only a rank that never starts reaches
        if all(os.path.exists(f"ready-{r}") for r in range(WORLD)):
            break
        time.sleep(0.01)
    else:
        sys.exit("the other ranks never started")

    class Failing(Workload):
        '''Steps of 50 ms; rank 1 fails in its step number AT (raise, SIGTERM, or stops answering).'''

        def __init__(self, how, at):
            super().__init__("failing")
            self.how, self.at, self.n = how, at, 0

        def phases(self):
            return [Phase("work", step=self.step, iterations=1, warmup=0)]

        def step(self):
            time.sleep(0.05)
            self.n += 1
            if RANK == 1 and self.n == self.at:
                if self.how == "raise":
                    raise RuntimeError("boom on rank 1")
                if self.how == "sigterm":
                    os.kill(os.getpid(), signal.SIGTERM)
                if self.how == "hang":
                    os.kill(os.getpid(), signal.SIGSTOP)

    how, out, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    try:
        ef.run(Failing(how, 3), power=["replay:file=p-{rank}.csv"], reporters=[], out=out,
               settings=ef.RunSettings(trials=5), dist_timeout_s=timeout)
    except ef.EnergyFrameError as e:
        print(f"rank error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
"""


def check_failed_run(run: Path, reason: str, ranks=(0, 1)) -> dict:
    """Incomplete, the failing rank named, and the windows measured before its failure kept."""
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "incomplete" and meta["reason"] == reason
    w = check_energies(run, ranks)
    # windows 0 and 1 were closed by every rank; window 2 was open when rank 1 failed
    assert sorted(set(w["trial"])) == [0, 1]
    assert not (run / "windows.partial.csv").exists()
    return meta


@pytest.mark.parametrize(
    "how,why",
    [("raise", "RuntimeError: boom on rank 1"), ("sigterm", "terminated by SIGTERM")],
)
def test_a_failing_rank_ends_every_rank(place, how, why):
    (place / "failing.py").write_text(textwrap.dedent(FAILING))
    done = torchrun("--standalone", "--nproc-per-node", "2", "failing.py", how, "run", "600", cwd=place)
    assert done.returncode != 0
    meta = check_failed_run(place / "run", f"rank 1 failed: {why}")
    assert [(r["rank"], r["status"]) for r in meta["distributed"]["ranks"]] == [(0, "incomplete"), (1, "incomplete")]
    assert meta["distributed"]["ranks"][1]["reason"] == why
    # rank 0 was stopped by rank 1's failure, and says so
    assert f"rank error: DistributedError: rank 1 failed: {why}" in done.stderr


def test_a_silent_rank_does_not_hang_rank_0(place):
    """srun's environment (no torchrun), rank 1 stops answering: rank 0 gives up after the
    timeout, saves what it has, and names the missing rank."""
    (place / "failing.py").write_text(textwrap.dedent(FAILING))
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "ENERGYFRAME_PORT": str(free_port()),
              "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2"}
    procs = {}
    for rank in (1, 0):
        env = clean_env(**common, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank))
        procs[rank] = subprocess.Popen(
            [sys.executable, "failing.py", "hang", "run", "3"], cwd=place, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    try:
        _out, err = procs[0].communicate(timeout=180)  # bounded: rank 0 does not wait forever
    finally:
        procs[1].send_signal(signal.SIGKILL)  # the stopped rank (this test started it)
        procs[1].communicate()
    assert procs[0].returncode == 1
    reason = "rank 1 did not answer: no answer before the timeout"
    assert f"rank error: DistributedError: {reason}" in err
    meta = check_failed_run(place / "run", reason, ranks=(0,))
    d = meta["distributed"]
    assert d["launcher"] == "srun" and d["missing_ranks"] == [1] and d["timeout_s"] == 3.0
    assert d["ranks"][1]["status"] == "missing"
    w = pd.read_csv(place / "run" / "windows.csv", dtype={"flags": str})
    total = w[w["channel"] == "total"]
    assert total["energy_j"].isna().all() and (total["flags"] == "incomplete-total").all()


DIVERGING = """
    import os, sys, time
    import energyframe as ef

    rank = int(os.environ["RANK"])
    try:
        with ef.measure(power=["replay:file=p-{rank}.csv"], out="run") as m:
            with m.window("load"):
                time.sleep(0.05)
            with m.window("prefill" if rank == 0 else "decode"):  # a bug: the ranks differ
                time.sleep(0.05)
    except ef.DistributedError as e:
        print(f"rank {rank}: {e}", file=sys.stderr)
        sys.exit(1)
"""


def test_ranks_that_go_different_ways_are_stopped_with_both_named(place):
    (place / "diverging.py").write_text(textwrap.dedent(DIVERGING))
    done = torchrun("--standalone", "--nproc-per-node", "2", "diverging.py", cwd=place)
    assert done.returncode != 0
    reason = (
        "the ranks went different ways (rank 0 was to open window 'prefill'; rank 1 was to open window "
        "'decode'): every rank must measure the same phases and windows, in the same order"
    )
    for rank in (0, 1):
        assert f"rank {rank}: {reason}" in done.stderr
    meta = json.loads((place / "run" / "run.json").read_text())
    assert (meta["status"], meta["reason"]) == ("incomplete", reason)
    w = check_energies(place / "run")
    assert set(w["phase"]) == {"load"}  # the window every rank measured is kept


FLAKY = """
    import sys, time
    import energyframe as ef
    from energyframe.plugin import Channel, PowerSource, PowerSourceError, Quantity, Sample, Scope

    class Flaky(PowerSource):
        '''10 W every 10 ms; on rank 1 the meter is unplugged after 1.5 s.'''

        PER_PROCESS = True

        def start(self, context):
            self.rank, self.t0 = context.rank, time.monotonic()
            self.last = self.t0
            return [Channel("flaky", Quantity.POWER, Scope.GPU, 0.01)]

        def read(self):
            now = time.monotonic()
            if self.rank == 1 and now - self.t0 > 1.5:
                raise PowerSourceError("meter unplugged")
            out = []
            while self.last + 0.01 <= now:
                self.last += 0.01
                out.append(Sample("flaky", self.last, 10.0))
            return out

        def stop(self):
            pass

    try:
        ef.run("sleep:seconds=0.05", power=[Flaky("flaky")], reporters=[], out="run",
               settings=ef.RunSettings(trials=200))
    except ef.EnergyFrameError as e:
        print(f"rank error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
"""


def test_a_source_failing_on_one_rank_ends_every_rank(place):
    (place / "flaky.py").write_text(textwrap.dedent(FLAKY))
    done = torchrun("--standalone", "--nproc-per-node", "2", "flaky.py", cwd=place)
    assert done.returncode != 0
    why = "power source 'flaky' failed: meter unplugged"
    assert f"rank error: DistributedError: rank 1 failed: {why}" in done.stderr
    meta = json.loads((place / "run" / "run.json").read_text())
    assert (meta["status"], meta["reason"]) == ("incomplete", f"rank 1 failed: {why}")
    w = pd.read_csv(place / "run" / "windows.csv")
    trials = {rank: set(w[w["rank"] == rank]["trial"]) for rank in (0, 1)}
    # the windows every rank closed before the failure are kept, the same on both ranks
    assert trials[0] == trials[1] and 0 < len(trials[0]) < 200
