"""``energyframe serve-bench``: load an OpenAI-compatible LLM server and measure each request's
energy on this machine's GPUs (docs/serving.md). ``serve_bench`` is the Python entry point,
``read_requests`` a saved run's requests.csv. The names are imported on first use, so that the
command line's start (which registers ``serving.cli``) imports none of this package's work."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .prompts import Prompt
    from .requests import read_requests
    from .run import serve_bench
    from .workload import ServeBenchWorkload

_HOMES = {
    "Prompt": "prompts",
    "serve_bench": "run",
    "ServeBenchWorkload": "workload",
    "read_requests": "requests",
}
__all__ = ["Prompt", "ServeBenchWorkload", "read_requests", "serve_bench"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'energyframe.serving' has no attribute {name!r}")
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
