"""``connect``: the run's coordinator, chosen from the launcher's environment: ``Alone`` for
one process, ``TorchCoordinator`` for several ranks."""

from __future__ import annotations

import sys

from ..errors import UsageError
from .coordinator import DEFAULT_TIMEOUT_S, Alone, Coordinator
from .gloo import TorchCoordinator
from .world import World, export_launcher_env, world


def connect(spec: Coordinator | str | None = "auto", timeout_s: float | None = None) -> Coordinator:
    """The run's coordinator: ``"auto"`` joins the ranks a launcher started (or the process group
    the caller initialised), else the single-process identity; ``None``: a single process; or a
    ``Coordinator`` to use as it is.

    Raises:
        UsageError: a launcher's environment that cannot work (no MASTER_ADDR, bad numbers).
        DistributedError: the ranks could not meet.
    """
    if isinstance(spec, Coordinator):
        return spec
    if spec is None:
        return Alone()
    if spec != "auto":
        raise UsageError(f"coordinator must be 'auto', None or a Coordinator, got {spec!r}")
    w = export_launcher_env(world())
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        local = w.local_rank if w.launched else dist.get_rank()
        w = World(dist.get_rank(), local, dist.get_world_size(), True, w.launcher or "torch.distributed")
    if not w.distributed:
        return Alone(w)
    return TorchCoordinator(w, DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)


