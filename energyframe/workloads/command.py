"""``command``: measure any program, e.g. ``energyframe run --power nvml -- python train.py``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import OptionError, WorkloadError
from ..model import Phase
from ..options import Option
from ..plugin import Workload

#: after forwarding SIGINT, how long the program gets before SIGTERM, then SIGKILL. Units: s.
GRACE_S = (10.0, 5.0)


class CommandWorkload(Workload):
    """Runs a program (never through a shell) inside one window per run of it."""

    DESCRIPTION = "run a program (no shell) in one window; its exit code is recorded and returned"
    OPTIONS = (
        Option("argv", "list", required=True, help="the program and its arguments (after -- on the CLI)"),
        Option("repeat", "int", 1, "run the program this many times, one window each", minimum=1),
        Option("cwd", "path", None, "working directory of the program"),
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        argv = self.options["argv"]
        if not argv:
            raise OptionError("the command workload needs a program to run (energyframe run -- PROGRAM ARGS)")
        if not _runnable(argv[0], self.options["cwd"]):
            raise OptionError(f"command not found or not executable: {argv[0]!r}")
        self.exit_codes: list[int] = []

    def phases(self) -> Sequence[Phase]:
        return [
            Phase(
                name="command",
                step=self._run_once,
                iterations=1,
                warmup=0,
                trials=self.options["repeat"],
            )
        ]

    def _run_once(self) -> None:
        argv = list(self.options["argv"])
        try:
            proc = subprocess.Popen(argv, cwd=self.options["cwd"])
        except OSError as e:
            raise WorkloadError(f"could not start {argv[0]!r}: {e.strerror or e}") from e
        try:
            code = proc.wait()
        except BaseException:
            _stop_child(proc)
            self.exit_codes.append(proc.returncode if proc.returncode is not None else -signal.SIGKILL)
            raise
        self.exit_codes.append(code)

    @property
    def exit_code(self) -> int | None:
        if not self.exit_codes:
            return None
        failed = [c for c in self.exit_codes if c != 0]
        code = failed[0] if failed else 0
        # a program killed by signal N reports -N; a shell would report 128 + N
        return 128 - code if code < 0 else code

    def info(self) -> Mapping[str, Any]:
        return {"argv": list(self.options["argv"]), "exit_codes": list(self.exit_codes)}


def _runnable(program: str, cwd) -> bool:
    if "/" in program:  # a path: relative to the program's working directory
        path = os.path.join(cwd or ".", program)
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return shutil.which(program) is not None


def _stop_child(proc: subprocess.Popen) -> None:
    """Forward the interrupt, then escalate; never leave the measured program running."""
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGINT, GRACE_S[0]), (signal.SIGTERM, GRACE_S[1]), (signal.SIGKILL, None)):
        try:
            proc.send_signal(sig)
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:  # impatient second Ctrl-C: kill now
            proc.kill()
            proc.wait()
            return
