"""The run's ``Coordinator``: how one process measures together with the other ranks.

A measurement talks to its coordinator at every point where ranks must agree: the run
directory, the start, every window edge, every agreed count, the end. ``connect`` returns the
run's coordinator: ``Alone`` for a single process, where every method is the identity, or
``TorchCoordinator`` (``energyframe.ranks.gloo``) for several ranks, which keeps them in step
over a gloo control group of its own (docs/distributed.md has the protocol).

torch is imported only when several ranks run: the command line must start without it.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .world import World

#: how long a rank waits for its peers in one exchange before counting them lost. Units: s.
DEFAULT_TIMEOUT_S = 1800.0


def fingerprint(text: str) -> int:
    """A number that stands for ``text`` in an exchange (exact in a float64)."""
    return zlib.crc32(text.encode())



@dataclass
class RankInfo:
    """What rank 0 learns about every rank when the run starts. Units: s."""

    rank: int
    local_rank: int
    host: str
    boot_id: str
    pid: int
    devices: list[str] | None = None
    #: the GPUs this rank's sources measure: ``(source, uuid or index)``
    gpus: list[tuple[str, str]] = field(default_factory=list)
    #: the run directory this rank was given (rank 0's is the one used)
    out: str | None = None
    #: offset of this rank's monotonic clock from rank 0's, and its uncertainty
    clock_offset_s: float = 0.0
    clock_uncertainty_s: float = 0.0
    measured_offset_s: float = 0.0
    shared_clock: bool = True



class Coordinator(ABC):
    """How this process measures with the others (the interface every measurement talks to).

    Attributes:
        world: this process's place among the ranks.
        ranks: rank 0's description of every rank once the run has started (empty alone).
        root_out: the run directory rank 0 saves into, as every rank learns it.
        backend: the control group's transport (``None`` alone).
        lost: ranks that stopped answering, and why.
        end_message: set once the run has ended for every rank: why (``None`` for a normal end).
    """

    #: whether several ranks measure this run
    distributed: ClassVar[bool] = False

    def __init__(self, w: World | None = None) -> None:
        self.world = w or World()
        self.rank = self.world.rank
        self.local_rank = self.world.local_rank
        self.world_size = self.world.world_size
        self.timeout_s = DEFAULT_TIMEOUT_S
        self.end_message: str | None = None
        self.ended = False
        self.lost: dict[int, str] = {}
        self.ranks: dict[int, RankInfo] = {}
        self.root_out: Path | None = None
        self.backend: str | None = None

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @abstractmethod
    def edge(self, what: str) -> None:
        """Wait until every rank is at the same point (``what``: the point, e.g. "open window
        'x'"); raise ``DistributedError`` if a rank failed or is elsewhere."""

    def holding_signals(self) -> AbstractContextManager[None]:
        """A block that Ctrl-C and SIGTERM cannot cut in two (handled as it ends): with several
        ranks, an exchange and what it decided, so that a window every rank closed is recorded
        by every rank. Alone, nothing is held."""
        return nullcontext()

    @abstractmethod
    def agree(self, value: float, what: str, how: str = "max") -> float:
        """``value`` as every rank takes it: the largest (``max``), the smallest (``min``), rank
        0's (``root``) or the sum over the ranks (``sum``)."""

    @abstractmethod
    def decide_out(self, out: Path | None, claim: Callable[[Path], None]) -> Path | None:
        """The run directory this rank writes (rank 0 claims it with ``claim``)."""

    @abstractmethod
    def after_start(self, info: RankInfo) -> None:
        """Every rank's sources delivered: exchange what each rank is (rank 0 keeps ``ranks``)."""

    @abstractmethod
    def finish(self, part: Any, failed: str | None) -> Any:
        """End the run: every rank's part, by rank, on rank 0 (``None`` on the others)."""

    @abstractmethod
    def acknowledge(self, answer: Any, ranks: Sequence[int]) -> None:
        """Rank 0: tell the other ranks how the run was saved."""

    @abstractmethod
    def close(self) -> None:
        """Release the control group."""


class Alone(Coordinator):
    """One process: nothing to agree on. Every method is the identity, so that the code that
    measures reads the same with one rank or many."""

    def edge(self, what: str) -> None:
        pass

    def agree(self, value: float, what: str, how: str = "max") -> float:
        return value

    def decide_out(self, out: Path | None, claim: Callable[[Path], None]) -> Path | None:
        if out is not None:
            claim(out)
        self.root_out = out
        return out

    def after_start(self, info: RankInfo) -> None:
        self.ranks = {0: info}

    def finish(self, part: Any, failed: str | None) -> Any:
        return {self.rank: part}

    def acknowledge(self, answer: Any, ranks: Sequence[int]) -> None:
        pass

    def close(self) -> None:
        pass
