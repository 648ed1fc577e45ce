"""``energyframe sweep --devices 0,1,...``: the shards of one sweep in parallel, one process per GPU.

Each child is ``python -m energyframe sweep ... --shard I/N --out OUT/shards/I`` with
``CUDA_VISIBLE_DEVICES`` set to its one GPU, so it measures that GPU with the same ``--power``
spec (the ``nvml`` source measures the GPUs CUDA sees). Their output is streamed, each line
prefixed with its GPU, and kept in ``OUT/shards/I.log``. When they have ended, the shards are
merged (``results.merge``) into ``OUT``, each configuration labelled with its GPU; a child that
failed is named with its reason, its configurations are recorded ``not run`` with that reason,
and the command fails. Ctrl-C (or SIGTERM) is passed on to every child, which saves what it
measured; that is merged too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import RunInterrupted, StoreError, UsageError, WorkloadError
from .results import NOT_RUN, RESULTS_JSON, KernelResult, SweepResult, merge

#: how long children may take to save their results after Ctrl-C, then SIGTERM, then SIGKILL. Units: s.
STOP_GRACE_S = 60.0
KILL_GRACE_S = 10.0


@dataclass(frozen=True)
class Child:
    """One child process: its command, environment additions, and where it writes.

    Args:
        device: the ``--devices`` entry it measures (its label in the results).
        shard: (I, N).
        command: the argv.
        env: variables set for it on top of this process's environment.
        out: its result directory.
        log: the file its output is copied into.
    """

    device: str
    shard: tuple[int, int]
    command: tuple[str, ...]
    env: Mapping[str, str]
    out: Path
    log: Path


@dataclass(frozen=True)
class Outcome:
    """How a child ended: ``exit_code`` (negative: killed by that signal) and, when it failed,
    ``reason`` (its last ``Error:`` line, or what happened to it)."""

    child: Child
    exit_code: int
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def parse_devices(text: str, visible: str | None = None) -> list[tuple[str, str]]:
    """``"0,1"`` -> [(label, CUDA_VISIBLE_DEVICES value)] per GPU.

    Indices refer to the GPUs this process sees: with ``CUDA_VISIBLE_DEVICES=2,3`` set, device 0
    is GPU 2. UUIDs (``GPU-...``, ``MIG-...``) are passed as they are.

    Raises:
        UsageError: an empty list, a duplicate, an index that is not visible.
    """
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise UsageError(f"--devices {text!r}: expected GPU indices or UUIDs, e.g. 0,1,2,3")
    if len(set(entries)) != len(entries):
        raise UsageError(f"--devices {text!r}: a GPU is named twice")
    seen = [v.strip() for v in visible.split(",")] if visible else None
    return [_device(entry, seen, text, visible) for entry in entries]


def _device(entry: str, seen: list[str] | None, text: str, visible: str | None) -> tuple[str, str]:
    """One entry of ``--devices`` as (label, CUDA_VISIBLE_DEVICES value): an index into the
    visible GPUs (``seen``; all of them when ``None``), or a UUID as it is.

    Raises:
        UsageError: naming ``text``: an index that is not visible, or neither index nor UUID.
    """
    if entry.isdigit():
        if seen is None:
            return (entry, entry)
        if int(entry) >= len(seen):
            raise UsageError(
                f"--devices {text!r}: device {entry} is not visible (CUDA_VISIBLE_DEVICES={visible} "
                f"makes devices 0..{len(seen) - 1} visible)"
            )
        return (entry, seen[int(entry)])
    if entry.startswith(("GPU-", "MIG-")):
        return (entry, entry)
    raise UsageError(
        f"--devices {text!r}: {entry!r} is neither a GPU index nor a UUID (GPU-...); expected e.g. 0,1,2,3"
    )


def children(
    argv: Sequence[str], devices: Sequence[tuple[str, str]], out: Path, python: str = sys.executable
) -> list[Child]:
    """The child of each device: ``python -m energyframe <argv> --shard I/N --out OUT/shards/I``."""
    count = len(devices)
    extra: dict[str, str] = {}
    if "CUDA_VISIBLE_DEVICES" not in os.environ and "CUDA_DEVICE_ORDER" not in os.environ:
        extra["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # indices as nvidia-smi and NVML number GPUs
    made = []
    for i, (label, visible) in enumerate(devices):
        shard_out = out / "shards" / str(i)
        made.append(
            Child(
                device=label,
                shard=(i, count),
                command=(python, "-m", "energyframe", *argv, f"--shard={i}/{count}", f"--out={shard_out}"),
                env={**extra, "CUDA_VISIBLE_DEVICES": visible},
                out=shard_out,
                log=out / "shards" / f"{i}.log",
            )
        )
    return made


def _last_error(lines: Sequence[str]) -> str:
    for line in reversed(lines):
        if line.startswith("Error: "):
            return line[len("Error: ") :].strip()
    return ""


def run_children(
    kids: Sequence[Child], echo: Callable[[str], None], grace_s: float = STOP_GRACE_S
) -> tuple[list[Outcome], bool]:
    """Start every child, stream its output (prefixed ``[GPU d]``) to ``echo`` and its log, and
    wait for all of them. Ctrl-C or SIGTERM is passed on to every child as SIGINT (each saves
    what it measured); a child still running ``grace_s`` later is terminated, then killed.

    Returns:
        Each child's outcome, and whether the run was interrupted.
    """
    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    tails: list[list[str]] = []
    readers: list[threading.Thread] = []

    def pump(proc: subprocess.Popen, kid: Child, tail: list[str]) -> None:
        with open(kid.log, "w", encoding="utf-8") as log:
            for raw in proc.stdout:  # type: ignore[union-attr]
                line = raw.rstrip("\n")
                log.write(raw)
                log.flush()
                tail.append(line)
                del tail[:-50]
                with lock:
                    echo(f"[GPU {kid.device}] {line}")

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        try:
            for kid in kids:
                kid.log.parent.mkdir(parents=True, exist_ok=True)
                proc = subprocess.Popen(
                    list(kid.command),
                    env={**os.environ, **kid.env},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                    start_new_session=True,  # Ctrl-C reaches them once, through us
                )
                procs.append(proc)
                tails.append([])
                reader = threading.Thread(target=pump, args=(proc, kid, tails[-1]), daemon=True)
                reader.start()
                readers.append(reader)
            for proc in procs:
                proc.wait()
        except KeyboardInterrupt:
            interrupted = True
            with lock:
                echo("interrupted: stopping every child (each saves what it measured)")
            _stop(procs, grace_s)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    for reader in readers:
        reader.join(timeout=5)
    outcomes = [
        _outcome(kid, procs[i], tails[i])
        if i < len(procs)
        else Outcome(kid, -signal.SIGINT, "not started: interrupted")
        for i, kid in enumerate(kids)
    ]
    return outcomes, interrupted


def _outcome(kid: Child, proc: subprocess.Popen, tail: Sequence[str]) -> Outcome:
    """A finished child's outcome: its exit code and, when it failed, why (its last error line,
    else the signal or exit code and its last output)."""
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    reason = ""
    if code != 0:
        reason = _last_error(tail)
        if not reason:
            reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            last = next((line for line in reversed(tail) if line.strip()), "")
            if last:
                reason += f"; last output: {last.strip()[:200]}"
    return Outcome(kid, code, reason)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    """SIGINT to each running child; SIGTERM to those alive after ``grace_s``; then SIGKILL."""
    for sig, wait_s in (
        (signal.SIGINT, grace_s),
        (signal.SIGTERM, KILL_GRACE_S),
        (signal.SIGKILL, KILL_GRACE_S),
    ):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return
        for proc in alive:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
        for proc in alive:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:  # another Ctrl-C: go on to the next, harder signal
                break


def placeholders(planned: Sequence, reason: str) -> tuple[KernelResult, ...]:
    """``not run`` results, with ``reason``, for a shard's planned configurations
    (``workload.Config``), so the merged results list every configuration (one that could not
    be configured keeps its error)."""
    return tuple(
        KernelResult(
            index=c.index,
            point_index=c.point_index,
            kernel=c.kernel.label,
            parameters=dict(c.point),
            block=c.block,
            grid=c.launch.grid if c.launch is not None else (0, 0, 0),
            status=NOT_RUN if c.launch is not None else c.status,
            error=reason if c.launch is not None else c.error,
            phase=c.phase,
            warnings=c.warnings,
        )
        for c in planned
    )


def collect(
    outcomes: Sequence[Outcome], plans: Mapping[int, Sequence] | None = None
) -> tuple[SweepResult | None, list[Outcome]]:
    """The merged result of the children's shards, and the children that failed.

    A child that saved results is merged as it is (its configurations not measured say why);
    one that saved nothing gets ``not run`` placeholders from ``plans`` (shard index -> its
    planned configurations), with the child's reason.
    """
    parts: list[SweepResult] = []
    labels: list[str | None] = []
    failed: list[Outcome] = []
    empty: list[Outcome] = []
    for outcome in outcomes:
        part, outcome = _saved_part(outcome)
        if part is None:
            empty.append(outcome)
            failed.append(outcome)
            continue
        parts.append(part)
        labels.append(outcome.child.device)
        if not outcome.ok:  # it failed after saving part of its shard: merged, and reported
            failed.append(outcome)
    if not parts:
        return None, failed
    for outcome in empty:
        parts.append(_not_run_part(outcome, parts[0].meta, plans))
        labels.append(None)
    merged = merge(parts, labels=labels)
    meta = dict(merged.meta)
    meta["warnings"] = list(dict.fromkeys([*meta.get("warnings", []), *(failure_line(o) for o in failed)]))
    meta["failed_devices"] = [
        {"device": o.child.device, "shard": list(o.child.shard), "exit_code": o.exit_code, "reason": o.reason}
        for o in failed
    ]
    return replace(merged, meta=meta), failed


def _saved_part(outcome: Outcome) -> tuple[SweepResult | None, Outcome]:
    """The shard a child saved (None where it saved none, or one that cannot be read), and its
    outcome with the reason where it saved nothing readable."""
    path = outcome.child.out / RESULTS_JSON
    if not path.is_file():
        if outcome.ok:
            outcome = replace(outcome, reason=f"it saved no {RESULTS_JSON}")
        return None, outcome
    try:
        return SweepResult.load(path), outcome
    except (StoreError, UsageError) as e:
        return None, replace(outcome, reason="; ".join(filter(None, [outcome.reason, str(e)])))


def _not_run_part(
    outcome: Outcome, meta: Mapping[str, Any], plans: Mapping[int, Sequence] | None
) -> SweepResult:
    """A failed child's shard as ``not run`` placeholders of its planned configurations, with
    its reason (``meta``: a saved shard's, for the merge)."""
    kid = outcome.child
    reason = f"not run: GPU {kid.device} failed ({outcome.reason or 'its results are unreadable'})"
    meta = {**meta, "shard": list(kid.shard), "device": None, "warnings": []}
    return SweepResult(placeholders((plans or {}).get(kid.shard[0], ()), reason), meta)


def failure_line(outcome: Outcome) -> str:
    kid = outcome.child
    return f"GPU {kid.device} (shard {kid.shard[0]}/{kid.shard[1]}) failed: {outcome.reason}"


def summarise(failed: Sequence[Outcome]) -> str:
    """``GPUs 0, 1: <reason>; GPU 2: <other reason>``: the failures grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for outcome in failed:
        by_reason.setdefault(outcome.reason, []).append(outcome.child.device)
    return "; ".join(
        f"{'GPUs' if len(devices) > 1 else 'GPU'} {', '.join(devices)}: {reason}"
        for reason, devices in by_reason.items()
    )


def sweep_on_devices(
    argv: Sequence[str],
    devices: Sequence[tuple[str, str]],
    out: Path,
    plans: Mapping[int, Sequence],
    echo: Callable[[str], None],
    python: str = sys.executable,
) -> SweepResult:
    """Run one child per device, merge their shards into ``out`` and write the report and plots.

    Raises:
        UsageError: ``out`` already holds a sweep.
        WorkloadError: a child failed (the others' results are merged and saved first).
        RunInterrupted: Ctrl-C or SIGTERM (what the children saved is merged first).
    """
    if (out / RESULTS_JSON).exists() or (out / "shards").exists():
        raise UsageError(f"--out {str(out)!r} already holds a sweep: choose a new directory")
    kids = children(argv, devices, out, python)
    echo(f"{len(kids)} shards on GPUs {', '.join(k.device for k in kids)}; their logs in {out / 'shards'}")
    outcomes, interrupted = run_children(kids, echo)
    return finish(outcomes, interrupted, plans, out, echo)


def finish(
    outcomes: Sequence[Outcome],
    interrupted: bool,
    plans: Mapping[int, Sequence],
    out: Path,
    echo: Callable[[str], None],
) -> SweepResult:
    """Merge and save what the children left; raise when one failed or the run was stopped."""
    from .outputs import describe, write

    merged, failed = collect(outcomes, plans)
    if merged is not None:
        echo(describe(write(merged, out), out, complete=not failed and not interrupted))
    if interrupted:
        raise RunInterrupted(
            "interrupted by SIGINT: every child was stopped"
            + (f"; what they saved is merged in {out}" if merged is not None else "")
        )
    if failed:
        others = f"; the other GPUs' results are merged in {out}" if merged is not None else ""
        raise WorkloadError(f"{len(failed)} of {len(outcomes)} GPUs failed: {summarise(failed)}{others}")
    return merged  # type: ignore[return-value]
