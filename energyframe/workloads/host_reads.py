"""Values the host reads from the GPU in a call, fixed as an eager call read them, so that the
call can be captured in a CUDA graph.

Code that branches on a device value (``if not torch.isfinite(h).all():`` in BART's layers in
fp16, an ``.item()`` that sizes nothing) synchronises with the host, and a CUDA graph capture
that meets such a read fails: the whole model then ran eagerly, its time set by the host's
launches, and a per-layer closure compared that with units captured as graphs (BART: −77 %).

A graph replays fixed work on fixed inputs, and a captured call's inputs are fixed (its state is
made once). So the host's decisions can be fixed too: ``HostReads`` records every read of a GPU
tensor's value (``bool()``, ``.item()``, ``.tolist()``, ``int()``, ``float()``, an index) in
the eager warm-up calls, by where in the code it happened (file, line, and its count there), and
while the call is captured answers each read from the record without reading: the kernels that
compute the value are captured as they ran, the host's wait is not. It is used only when the last
two warm-up calls read the same values at the same places (the decisions do not change from call
to call); a read at a place that the warm-up never read (code that reads only outside a capture,
or only inside one) fails the capture, which then falls back to eager calls as before.

Reads the host does without Python asking (``nonzero``, boolean indexing, a copy to the CPU)
still synchronise: such calls run eagerly and say so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

#: where in the code a read happened: (the read's name, file, line)
Site = tuple[str, str, int]


def _is_cuda(tensor: Any) -> bool:
    return bool(getattr(tensor, "is_cuda", False))


class HostReadMissing(RuntimeError):
    """A captured call read a device value at a place the eager calls never read one."""


def _read_functions() -> frozenset:
    import torch

    t = torch.Tensor
    return frozenset({t.__bool__, t.item, t.tolist, t.__int__, t.__float__, t.__index__})


def _caller(depth: int = 2) -> tuple[str, int]:
    """The Python frame that asked for the read (the mode is called from C, right under it)."""
    frame = sys._getframe(depth)
    return frame.f_code.co_filename, frame.f_lineno


class HostReads:
    """Records a call's device reads, then replays them while the call is captured.

    ``recording(call)`` runs ``call`` once, recording; ``static`` says whether the last two
    recorded calls read the same values at the same places; ``replaying(call)`` runs ``call``
    with each read answered from the last record (``HostReadMissing`` for a read it lacks).

    Args:
        on_device: which tensors' reads are recorded and replayed (default: CUDA tensors; a
            read of a CPU tensor does not wait for the GPU and runs as it is).
    """

    def __init__(self, on_device: Callable[[Any], bool] | None = None) -> None:
        self._calls: list[dict[Site, list[Any]]] = []
        self._on_device = on_device or _is_cuda

    @property
    def reads(self) -> int:
        """How many device reads the last recorded call made."""
        return sum(len(v) for v in self._calls[-1].values()) if self._calls else 0

    def recording(self, call: Callable[[], Any]) -> Any:
        record: dict[Site, list[Any]] = {}
        self._calls = [*self._calls[-1:], record]
        with _Mode(self._record_into(record), self._on_device):
            return call()

    @property
    def static(self) -> bool:
        """The last two recorded calls read something, the same values at the same places."""
        return len(self._calls) == 2 and bool(self._calls[-1]) and self._calls[0] == self._calls[1]

    def replaying(self, call: Callable[[], Any]) -> Any:
        record = self._calls[-1]
        seen: dict[Site, int] = {}

        def answer(func, site: Site, args, kwargs):
            values = record.get(site)
            k = seen.get(site, 0)
            if values is None or k >= len(values):
                raise HostReadMissing(
                    f"{site[0]} at {site[1]}:{site[2]} read a device value that the eager calls did not read there"
                )
            seen[site] = k + 1
            return values[k]

        with _Mode(answer, self._on_device):
            return call()

    @staticmethod
    def _record_into(record: dict[Site, list[Any]]):
        def read(func, site: Site, args, kwargs):
            value = func(*args, **kwargs)
            record.setdefault(site, []).append(value)
            return value

        return read


class _Mode:
    """A torch function mode that hands reads of CUDA tensors to ``handle(func, site, args,
    kwargs)`` and lets everything else run."""

    def __init__(self, handle: Callable[..., Any], on_device: Callable[[Any], bool]) -> None:
        self.handle = handle
        self.on_device = on_device

    def __enter__(self):
        from torch.overrides import TorchFunctionMode

        reads, handle, on_device = _read_functions(), self.handle, self.on_device

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                # (torch turns the mode off while its handler runs: the read below is plain)
                if func in reads and args and on_device(args[0]):
                    return handle(func, (func.__name__, *_caller()), args, kwargs)
                return func(*args, **kwargs)

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
