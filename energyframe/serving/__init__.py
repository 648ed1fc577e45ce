"""``energyframe serve-bench``: load an OpenAI-compatible LLM server and measure each request's
energy on this machine's GPUs (docs/serving.md). ``serve_bench`` is the Python entry point,
``read_requests`` a saved run's requests.csv."""

from .prompts import Prompt
from .run import serve_bench
from .workload import ServeBenchWorkload, read_requests

__all__ = ["Prompt", "ServeBenchWorkload", "read_requests", "serve_bench"]
