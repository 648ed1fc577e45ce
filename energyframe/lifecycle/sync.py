"""Device synchronisation without importing a framework the user has not imported."""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..model import no_sync


def torch_cuda_sync() -> None:
    """Wait for every CUDA device this process has touched, if torch has initialised CUDA.

    Looks torch up in ``sys.modules`` instead of importing it: code that never imported torch has
    no CUDA work queued, and importing torch would cost seconds.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    for index in range(torch.cuda.device_count()):
        torch.cuda.synchronize(index)


def resolve_sync(sync: str | Callable[[], None] | None) -> Callable[[], None]:
    """``"auto"``: torch CUDA if in use; ``None``: nothing; a callable: itself."""
    if sync is None:
        return no_sync
    if sync == "auto":
        return torch_cuda_sync
    if callable(sync):
        return sync
    raise ValueError(f"sync must be 'auto', None or a callable, not {sync!r}")
