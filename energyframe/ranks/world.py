"""Who this process is among the ranks a launcher started (``torchrun`` or ``srun``), read from
the environment, and the machine it runs on.

A launcher starts one process per GPU and tells it who it is in the environment: ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` (torchrun), or ``SLURM_PROCID``, ``SLURM_LOCALID`` and
``SLURM_STEP_NUM_TASKS`` (srun). ``world`` reads it. torch is not imported here.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

#: this machine's boot: ranks that share it share one monotonic clock
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class World:
    """This process's place among the ranks, as the launcher set it in the environment.

    Args:
        rank: 0..world_size-1 over the whole run.
        local_rank: the rank's index on its machine; it picks the GPU (``cuda:LOCAL_RANK``).
        world_size: processes in the run.
        launched: a launcher set the variables (also with one process).
        launcher: ``torchrun``, ``srun``, or ``environment`` (RANK/WORLD_SIZE set by other means).
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    launched: bool = False
    launcher: str = ""

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def world(env: Mapping[str, str] | None = None) -> World:
    """The launcher's environment: torchrun's (``WORLD_SIZE`` set) first, else srun's
    (``SLURM_STEP_NUM_TASKS``, set in a job step only, not in the batch script), else one
    process.

    Raises:
        UsageError: a variable that is not an integer, or a rank outside the world.
    """
    env = os.environ if env is None else env
    srun = "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env
    if "WORLD_SIZE" in env:
        names, hint = ("RANK", "LOCAL_RANK", "WORLD_SIZE"), "torchrun sets them"
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "srun" if srun else "environment"
    elif srun:
        names, launcher = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS"), "srun"
        hint = "srun sets them"
    else:
        return World()
    try:
        size = int(env[names[2]])
        rank = int(env.get(names[0], "0"))
        local = int(env.get(names[1], str(rank)))
    except ValueError as e:
        raise UsageError(f"{names[0]}, {names[1]} and {names[2]} must be integers ({hint}): {e}") from e
    if size < 1 or not 0 <= rank < size or local < 0:
        raise UsageError(f"{names[0]}={rank} and {names[1]}={local} do not fit {names[2]}={size}")
    return World(rank, local, size, True, launcher)


def export_launcher_env(w: World | None = None) -> World:
    """Under srun, also set ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` (where unset), so that
    torch's ``env://`` initialisation and the workloads see the ranks as under torchrun."""
    w = w or world()
    if w.launcher == "srun":
        os.environ.setdefault("RANK", str(w.rank))
        os.environ.setdefault("LOCAL_RANK", str(w.local_rank))
        os.environ.setdefault("WORLD_SIZE", str(w.world_size))
    return w


def host_name() -> str:
    """The name this rank's machine is recorded under."""
    return socket.gethostname()


def boot_id() -> str:
    """This machine's boot identifier ('' where unknown): one boot, one monotonic clock."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def rank_devices(w: World) -> list[str] | None:
    """The GPU this rank uses, for the power sources (``SourceContext.devices``): under a launcher
    the GPU of ``LOCAL_RANK``, as a UUID when torch has already initialised CUDA here, else as a
    CUDA ordinal (``cuda:N``, an index among the GPUs ``CUDA_VISIBLE_DEVICES`` shows). ``None``
    without a launcher: the sources measure what they measure by default."""
    if not w.launched:
        return None
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            count = torch.cuda.device_count()
            index = w.local_rank if w.local_rank < count else (0 if count == 1 else None)
            if index is not None:
                return ["GPU-" + str(torch.cuda.get_device_properties(index).uuid)]
    except Exception:  # an older torch without .uuid: the ordinal below
        pass
    return [f"cuda:{w.local_rank}"]
