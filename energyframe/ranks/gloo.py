"""Several ranks measuring one run: ``TorchCoordinator`` over a gloo control group.

The coordinator keeps the ranks' measurements in step over a control group of its own (gloo, on
the CPU: no GPU kernel, nothing mixed into the workload's collectives). Every exchange is a star
around rank 0: each rank sends rank 0 a short vector (its state, a fingerprint of what it is
about to do, a value) and rank 0 answers every rank with all of them, so that every rank takes
the same decision from the same numbers: open a window, agree a count, stop. A rank that failed
says so in the next exchange, and every rank stops there; a rank that says nothing within the
timeout, or whose connection closed (its process died), is lost, and the others stop without it.
At the end every rank sends rank 0 its part of the run (``RankPart``), which rank 0 merges and
saves (``energyframe.ranks.merge``).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import math
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DistributedError, EnergyFrameError, RunInterrupted, UsageError
from .coordinator import DEFAULT_TIMEOUT_S, Coordinator, RankInfo, fingerprint
from .world import World, boot_id, host_name

log = logging.getLogger("energyframe")

#: round trips to each rank when its clock offset is measured (the shortest one is kept)
PING_ROUNDS = 16

# what a rank says about itself in an exchange
OK, FINISH, FAIL, LOST = 0, 1, 2, 3
# the message kinds (gloo tags): an exchange's vector and answer, an object, a clock ping
_TAG_ROUND, _TAG_ANSWER, _TAG_OBJECT, _TAG_PING = 11, 12, 13, 14
#: the vector each rank sends: flag, fingerprint of what it does, a value, spare
_K = 4


class _PGTransport:
    """Point-to-point messages over a gloo process group of our own."""

    def __init__(self, pg) -> None:
        self.pg = pg

    def send(self, tensor, peer: int, tag: int):
        return self.pg.send([tensor], peer, tag)

    def recv(self, tensor, peer: int, tag: int):
        return self.pg.recv([tensor], peer, tag)

    def close(self) -> None:
        for name in ("shutdown", "abort"):
            method = getattr(self.pg, name, None)
            if method is not None:
                try:
                    method()
                except Exception:  # closing a broken group must not hide the run's own error
                    pass
                return


class _GroupTransport:
    """Point-to-point messages over a gloo group made beside the caller's process group."""

    def __init__(self, group) -> None:
        self.group = group

    def send(self, tensor, peer: int, tag: int):
        import torch.distributed as dist

        return dist.isend(tensor, peer, group=self.group, tag=tag)

    def recv(self, tensor, peer: int, tag: int):
        import torch.distributed as dist

        return dist.irecv(tensor, peer, group=self.group, tag=tag)

    def close(self) -> None:
        import torch.distributed as dist

        try:
            if dist.is_initialized():
                dist.destroy_process_group(self.group)
        except Exception:  # the caller's group may already be gone
            pass


_STORES: dict[tuple[str, int], Any] = {}
_GROUPS = itertools.count()


def _rendezvous_address(w: World) -> tuple[str, str]:
    """MASTER_ADDR and MASTER_PORT, or the one line that says they are missing."""
    addr, port_text = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port_text:
        raise UsageError(
            f"{w.world_size} ranks were started ({w.launcher}), but MASTER_ADDR and MASTER_PORT are not set: "
            "export them (the address of the first task's machine and a free port) before starting "
            "the ranks (docs/distributed.md has a Slurm batch script)"
        )
    return addr, port_text


def _torch_group_ready() -> bool:
    """Whether the workload initialised torch.distributed already (then no address is needed).
    Asked without importing torch: a group can only exist where torch.distributed is imported,
    and the import belongs to the joining thread, where a Ctrl-C does not wait for it."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def _our_store(w: World, timeout: _dt.timedelta):
    """The rendezvous store when nobody has initialised torch.distributed: torchrun's agent store
    (``TORCHELASTIC_USE_AGENT_STORE``), else one hosted by rank 0 on ``ENERGYFRAME_PORT`` (default
    ``MASTER_PORT + 1``, leaving ``MASTER_PORT`` to the workload's own process group)."""
    import torch.distributed as dist

    env = os.environ
    addr, port_text = _rendezvous_address(w)
    try:
        port = int(port_text)
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        if not agent:
            port = int(env.get("ENERGYFRAME_PORT") or port + 1)
    except ValueError as e:
        raise UsageError(f"MASTER_PORT and ENERGYFRAME_PORT must be port numbers: {e}") from e
    key = (addr, port)
    if key not in _STORES:
        try:
            if agent:
                _STORES[key] = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
            else:
                _STORES[key] = dist.TCPStore(
                    addr, port, w.world_size, is_master=w.rank == 0, timeout=timeout, wait_for_workers=False
                )
        except Exception as e:  # torch raises several kinds
            where = "" if agent else " (set ENERGYFRAME_PORT to a free port)"
            raise DistributedError(
                f"rank {w.rank} could not reach the rendezvous store at {addr}:{port}{where}: {_short(e)}"
            ) from e
    return _STORES[key]


def _short(error: BaseException) -> str:
    """A gloo error said in a few words."""
    text = str(error)
    if "Timed out" in text or "timeout" in text.lower():
        return "no answer before the timeout"
    if "Connection closed" in text or "Connection reset" in text or "Broken pipe" in text:
        return "its connection closed (the process died or was killed)"
    return f"{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}"


@contextmanager
def _shielded() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until an exchange is complete (main thread only): a rank that
    stopped half-way through one would leave its peers waiting for the other half. A held
    signal is handled as soon as the exchange ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is None or handler == signal.SIG_IGN:
            continue
        previous[sig] = signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            else:  # the default action (terminate), now
                os.kill(os.getpid(), signum)


@dataclass
class Verdict:
    """What every rank said in one exchange, in rank order."""

    flags: list[int]
    keys: list[int]
    values: list[float]

    @property
    def failed(self) -> list[int]:
        return [r for r, f in enumerate(self.flags) if f == FAIL]

    @property
    def lost(self) -> list[int]:
        return [r for r, f in enumerate(self.flags) if f == LOST]

    def clean(self, flag: int) -> bool:
        """Every rank said ``flag`` about the same thing."""
        return all(f == flag for f in self.flags) and len(set(self.keys)) == 1


class TorchCoordinator(Coordinator):
    """Several ranks over a gloo control group; rank 0 at the centre of every exchange.

    Args:
        w: this process's place among the ranks.
        timeout_s: how long any exchange may wait for a peer before it counts as lost. Units: s.
    """

    distributed = True

    def __init__(self, w: World, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(w)
        if not timeout_s > 0:
            raise UsageError(f"the distributed timeout must be positive, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.host = host_name()
        self.boot = boot_id()
        self.backend = "gloo"
        #: ranks that stopped answering, and why
        self.lost: dict[int, str] = {}
        #: rank 0: every rank's description, once the run has started
        self.ranks: dict[int, RankInfo] = {}
        self._transport = self._join_interruptibly()

    # -- joining --------------------------------------------------------------------------------
    def _join_interruptibly(self):
        """Join the other ranks, saying at once what this rank waits for; a Ctrl-C stops the
        wait (gloo's rendezvous blocks in C++, where no signal handler runs, so it waits in a
        thread of its own while this one stays interruptible)."""
        if self.world_size > 1:
            if not _torch_group_ready():
                _rendezvous_address(self.world)  # refused in one line before any wait is announced
            env = os.environ
            where = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
            log.warning(
                "rank %d of %d (%s): waiting for the other ranks at %s, up to %g s (--dist-timeout); Ctrl-C stops",
                self.rank, self.world_size, self.world.launcher or "launcher variables", where, self.timeout_s,
            )
        outcome: dict[str, Any] = {}

        def join() -> None:
            try:
                outcome["transport"] = self._join()
            except BaseException as e:  # handed to the main thread
                outcome["error"] = e

        thread = threading.Thread(target=join, name="energyframe-join", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.2)
        except KeyboardInterrupt:
            raise RunInterrupted("interrupted by SIGINT while waiting for the other ranks to join") from None
        if "error" in outcome:
            raise outcome["error"]
        return outcome["transport"]

    def _join(self):
        try:
            import torch.distributed as dist
        except ImportError as e:
            raise UsageError(f"{self.world_size} ranks need torch.distributed: {e}") from e
        if not dist.is_available() or not dist.is_gloo_available():
            raise UsageError("this torch was built without torch.distributed's gloo backend")
        timeout = _dt.timedelta(seconds=self.timeout_s)
        try:
            if dist.is_initialized():
                if dist.get_world_size() != self.world_size:
                    raise UsageError(
                        f"the process group has {dist.get_world_size()} ranks but the launcher started "
                        f"{self.world_size}"
                    )
                return _GroupTransport(dist.new_group(backend="gloo", timeout=timeout))
            store = _our_store(self.world, timeout)
            # a restart of the workers (torchrun --max-restarts) must not meet the last attempt's keys
            attempt = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '')}"
            prefix = f"energyframe/{attempt}/{next(_GROUPS)}"
            pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), self.rank, self.world_size, timeout)
            return _PGTransport(pg)
        except EnergyFrameError:
            raise
        except Exception as e:  # gloo and the store raise RuntimeError, DistStoreError...
            raise DistributedError(f"rank {self.rank} could not join the other ranks: {_short(e)}") from e

    def close(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    # -- messages -----------------------------------------------------------------------------
    def _deadline(self) -> float:
        return time.monotonic() + self.timeout_s

    @staticmethod
    def _wait(work, deadline: float) -> None:
        left = max(0.001, deadline - time.monotonic())
        work.wait(_dt.timedelta(seconds=left))

    def _live_peers(self) -> list[int]:
        return [r for r in range(1, self.world_size) if r not in self.lost]

    def _lose(self, rank: int, error: BaseException | str) -> None:
        if rank not in self.lost:
            self.lost[rank] = error if isinstance(error, str) else _short(error)
            log.debug("rank %d lost rank %d: %s", self.rank, rank, self.lost[rank])

    def _send_object(self, obj: Any, peer: int, deadline: float) -> None:
        import torch

        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        size = torch.tensor([len(data)], dtype=torch.int64)
        self._wait(self._transport.send(size, peer, _TAG_OBJECT), deadline)
        if data:
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            self._wait(self._transport.send(payload, peer, _TAG_OBJECT), deadline)

    def _recv_object(self, peer: int, deadline: float) -> Any:
        import torch

        size = torch.zeros(1, dtype=torch.int64)
        self._wait(self._transport.recv(size, peer, _TAG_OBJECT), deadline)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        if payload.numel():
            self._wait(self._transport.recv(payload, peer, _TAG_OBJECT), deadline)
        return pickle.loads(payload.numpy().tobytes())

    def _round(self, flag: int, what: str, value: float = 0.0) -> Verdict:
        """One exchange: every rank's (flag, fingerprint, value), the same on every rank."""
        import torch

        if self._transport is None:
            raise DistributedError("the ranks' control group is closed")
        mine = torch.tensor([flag, fingerprint(what), value, 0.0], dtype=torch.float64)
        deadline = self._deadline()
        with _shielded():
            if self.is_root:
                rows = [torch.tensor([LOST, 0.0, float("nan"), 0.0], dtype=torch.float64)] * self.world_size
                rows = list(rows)
                rows[0] = mine
                pending = []
                for r in self._live_peers():
                    buf = torch.zeros(_K, dtype=torch.float64)
                    pending.append((r, buf, self._transport.recv(buf, r, _TAG_ROUND)))
                for r, buf, work in pending:
                    try:
                        self._wait(work, deadline)
                        rows[r] = buf
                    except Exception as e:
                        self._lose(r, e)
                matrix = torch.stack(rows)
                sends = []
                for r in self._live_peers():
                    sends.append((r, self._transport.send(matrix, r, _TAG_ANSWER)))
                for r, work in sends:
                    try:
                        self._wait(work, deadline)
                    except Exception as e:  # counted lost from the next exchange on
                        self._lose(r, e)
            else:
                matrix = torch.zeros(self.world_size, _K, dtype=torch.float64)
                try:
                    self._wait(self._transport.send(mine, 0, _TAG_ROUND), deadline)
                    self._wait(self._transport.recv(matrix, 0, _TAG_ANSWER), deadline)
                except Exception as e:
                    self._lose(0, e)
                    matrix[:, 0] = OK
                    matrix[0, 0] = LOST
                    matrix[self.rank] = mine
        values = matrix.tolist()
        return Verdict([int(v[0]) for v in values], [int(v[1]) for v in values], [v[2] for v in values])

    # -- agreement ----------------------------------------------------------------------------
    def holding_signals(self) -> AbstractContextManager[None]:
        return _shielded()

    def edge(self, what: str) -> None:
        self._agreed(OK, what, 0.0)

    def agree(self, value: float, what: str, how: str = "max") -> float:
        verdict = self._agreed(OK, f"agree on {what}", float(value))
        if how == "max":
            return max(verdict.values)
        if how == "min":
            return min(verdict.values)
        if how == "root":
            return verdict.values[0]
        if how == "sum":
            return math.fsum(verdict.values)
        raise ValueError(f"how must be max, min, root or sum, got {how!r}")

    def _agreed(self, flag: int, what: str, value: float) -> Verdict:
        if self.ended:
            raise DistributedError(self.end_message or "the run has ended for every rank")
        verdict = self._round(flag, what, value)
        if not verdict.clean(flag):
            raise DistributedError(self._conclude(verdict, what))
        return verdict

    def _conclude(self, verdict: Verdict, mine: str) -> str:
        """The run has ended for every rank: say why, the same words on every rank."""
        self.ended = True
        if not self.is_root and 0 in self.lost:
            self.end_message = f"rank 0 did not answer: {self.lost[0]}"
            return self.end_message
        for r in verdict.lost:
            self._lose(r, "no answer")
        deadline = self._deadline()
        try:
            with _shielded():
                if self.is_root:
                    texts = {0: mine}
                    for r in self._live_peers():
                        try:
                            texts[r] = str(self._recv_object(r, deadline))
                        except Exception as e:
                            self._lose(r, e)
                    message = self._compose(verdict, texts)
                    for r in self._live_peers():
                        try:
                            self._send_object(message, r, deadline)
                        except Exception as e:
                            self._lose(r, e)
                else:
                    self._send_object(mine, 0, deadline)
                    message = str(self._recv_object(0, deadline))
        except Exception as e:  # rank 0 went away while explaining
            self._lose(0, e)
            message = f"rank 0 did not answer: {self.lost[0]}"
        self.end_message = message
        return message

    def _compose(self, verdict: Verdict, texts: Mapping[int, str]) -> str:
        parts = [f"rank {r} failed: {texts.get(r, 'no reason given')}" for r in verdict.failed]
        parts += [f"rank {r} did not answer: {self.lost.get(r, 'no answer')}" for r in sorted(self.lost)]
        if not parts:
            doing = "; ".join(f"rank {r} was to {texts[r]}" for r in sorted(texts))
            parts.append(
                f"the ranks went different ways ({doing}): every rank must measure the same phases "
                "and windows, in the same order"
            )
        return "; ".join(parts)

    # -- start ----------------------------------------------------------------------------------
    def decide_out(self, out: Path | None, claim: Callable[[Path], None]) -> Path | None:
        """The run directory is rank 0's: rank 0 claims it and tells every rank (another rank's
        ``out`` is not used; it is recorded). Returns the directory this rank writes (rank 0's;
        ``None`` on the others).

        Raises:
            UsageError: rank 0 could not claim it (every rank raises the same message).
        """
        deadline = self._deadline()
        with _shielded():
            if self.is_root:
                answer: dict[str, Any] = {"out": str(out) if out is not None else None, "error": None}
                try:
                    if out is not None:
                        claim(out)
                except EnergyFrameError as e:
                    answer["error"] = (type(e).__name__, str(e))
                    error: BaseException | None = e
                else:
                    error = None
                for r in self._live_peers():
                    try:
                        self._send_object(answer, r, deadline)
                    except Exception as e:
                        self._lose(r, e)
                if error is not None:
                    raise error
                self.root_out = out
                return out
            try:
                answer = self._recv_object(0, deadline)
            except Exception as e:
                raise DistributedError(f"rank 0 did not say where the run is saved: {_short(e)}") from e
        if answer["error"] is not None:
            kind, message = answer["error"]
            raise (UsageError if kind == "UsageError" else DistributedError)(f"rank 0: {message}")
        self.root_out = Path(answer["out"]) if answer["out"] is not None else None
        return None

    def after_start(self, info: RankInfo) -> None:
        """Every rank's sources delivered: measure each rank's clock against rank 0's, and bring
        every rank's description to rank 0 (``ranks``)."""
        import torch

        deadline = self._deadline()
        with _shielded():
            if self.is_root:
                self.ranks = {0: info}
                offsets = {r: self._ping(r, deadline) for r in self._live_peers()}
                for r in self._live_peers():
                    try:
                        theirs: RankInfo = self._recv_object(r, deadline)
                    except Exception as e:
                        self._lose(r, e)
                        continue
                    measured, uncertainty = offsets.get(r, (float("nan"), float("nan")))
                    theirs.measured_offset_s = measured
                    theirs.clock_uncertainty_s = uncertainty
                    theirs.shared_clock = bool(theirs.boot_id) and theirs.boot_id == info.boot_id
                    # one boot, one CLOCK_MONOTONIC: the measured offset is only the measurement's error
                    theirs.clock_offset_s = 0.0 if theirs.shared_clock else measured
                    self.ranks[r] = theirs
            else:
                tick = torch.zeros(1, dtype=torch.float64)
                try:
                    for _ in range(PING_ROUNDS):
                        self._wait(self._transport.recv(tick, 0, _TAG_PING), deadline)
                        tick[0] = time.monotonic()
                        self._wait(self._transport.send(tick, 0, _TAG_PING), deadline)
                    self._send_object(info, 0, deadline)
                except Exception as e:  # seen at the next exchange
                    self._lose(0, e)

    def _ping(self, peer: int, deadline: float) -> tuple[float, float]:
        """Cristian's method: rank ``peer``'s monotonic clock minus rank 0's, from the round trip
        with the shortest time, and half that time as its uncertainty. Units: s."""
        import torch

        tick = torch.zeros(1, dtype=torch.float64)
        best: tuple[float, float] | None = None
        try:
            for _ in range(PING_ROUNDS):
                sent = time.monotonic()
                tick[0] = sent
                self._wait(self._transport.send(tick, peer, _TAG_PING), deadline)
                self._wait(self._transport.recv(tick, peer, _TAG_PING), deadline)
                back = time.monotonic()
                estimate = (float(tick.item()) - (sent + back) / 2, (back - sent) / 2)
                if best is None or estimate[1] < best[1]:
                    best = estimate
        except Exception as e:
            self._lose(peer, e)
        return best if best is not None else (float("nan"), float("nan"))

    # -- finish ---------------------------------------------------------------------------------
    def finish(self, part: Any, failed: str | None) -> Any:
        """End the run for every rank and bring every rank's part to rank 0.

        ``failed``: why this rank's own run failed (``None``: it did not, or a peer's failure
        stopped it). Rank 0 returns every part it received, by rank (its own included); the
        others return rank 0's answer once it has saved the run (``None`` if it is gone).
        """
        if not self.ended:
            what = "finish the measurement"
            verdict = self._round(FAIL if failed else FINISH, what)
            if verdict.clean(FINISH):
                self.ended = True
            else:
                self._conclude(verdict, failed or what)
        deadline = self._deadline()
        with _shielded():
            if self.is_root:
                parts = {0: part}
                for r in self._live_peers():
                    try:
                        parts[r] = self._recv_object(r, deadline)
                    except Exception as e:
                        self._lose(r, e)
                return parts
            if 0 in self.lost:
                return None
            try:
                self._send_object(part, 0, deadline)
                return self._recv_object(0, deadline)
            except Exception as e:
                self._lose(0, e)
                return None

    def acknowledge(self, answer: Any, ranks: Sequence[int]) -> None:
        """Rank 0, once the run is saved: tell each rank that sent its part (they wait for it,
        so that no rank exits - and no launcher stops rank 0 - before the run is on disk)."""
        deadline = self._deadline()
        with _shielded():
            for r in ranks:
                if r != 0 and r not in self.lost:
                    try:
                        self._send_object(answer, r, deadline)
                    except Exception as e:
                        self._lose(r, e)
