"""CUDA-graph-captured calls: the ``GraphKernel`` workload and what pipelines build on.

A call (one kernel, or the few launches of a layer) is captured ``unroll`` times into one CUDA
graph and replayed; a phase step is one replay, so per-call latency and energy are a window's
totals divided by the calls in it, with the launch overhead of a single graph launch spread over
``unroll`` calls. Without CUDA the same calls run eagerly on the CPU, and say so.

torch is imported inside functions: ``energyframe list`` imports this module.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import OptionError, WorkloadError
from ..kit import extras
from ..model import DerivedTable, Phase, WorkloadContext
from ..options import Option
from ..plugin import Workload
from .host_reads import HostReads

if TYPE_CHECKING:
    import torch

log = logging.getLogger("energyframe")

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}
CPU_NOTE = "cpu, eager: no CUDA graph"


def torch_dtype(name: str):
    import torch

    return getattr(torch, DTYPES.get(name, name))


#: the element-type option of the model workloads
DTYPE_OPTION = Option(
    "dtype",
    "choice",
    "auto",
    "element type (auto: fp16 on a GPU, fp32 on the CPU)",
    choices=("auto", "fp16", "bf16", "fp32"),
)
#: a workload's own shortest window (``run_defaults``: ``min_window_s``)
WINDOW_S_OPTION = Option(
    "window_s",
    "float",
    None,
    "the shortest window, as --min-window (which wins when both are given). Units: s",
    minimum=1e-3,
)


def dtype_name(name: str, device) -> str:
    """A ``DTYPE_OPTION`` value with ``auto`` resolved for ``device`` (fp16 on a GPU, fp32 else)."""
    if name == "auto":
        return "fp16" if device is not None and device.type == "cuda" else "fp32"
    return name


def torch_device(spec: str, context: WorkloadContext | None = None) -> torch.device:
    """``auto``: the current CUDA device if there is one, else the CPU. Under a launcher
    (torchrun, srun) with several ranks, ``distributed.rank_device`` decides: ``auto`` and
    ``cuda`` are the rank's own GPU, ``cuda:LOCAL_RANK``, the one its power source measures.

    ``context``: the workload's (``Workload.context``); without one, the launcher's environment."""
    import torch

    from .distributed import rank_device, world

    w = context if context is not None else world()
    if w.distributed:
        return rank_device(spec, w)
    if spec == "auto":
        return (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WorkloadError(f"device {spec!r} was asked for, but torch sees no CUDA GPU here")
    return device


def device_sync(device) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def l2_cache_bytes(device) -> int:
    import torch

    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)


#: at most this many copies of a call's inputs, and this many bytes of them, when calls rotate
#: over copies to read their inputs from memory rather than from the L2
MAX_COPIES = 64
MAX_COPY_BYTES = 4 << 30


def copies_for(data_bytes: int, l2_bytes: int) -> int:
    """Copies of ``data_bytes`` that together exceed twice the L2 (bounded)."""
    if not data_bytes or not l2_bytes:
        return 1
    return max(1, min(MAX_COPIES, math.ceil(2 * l2_bytes / data_bytes), MAX_COPY_BYTES // data_bytes))


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (tensors, and lists, tuples and dicts of them)."""
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) and hasattr(value, "data_ptr") else 0


@dataclass
class Rotation:
    """A call whose consecutive calls read different copies of its inputs, enough copies to
    exceed twice the L2, so that each call reads its inputs from memory as it would in the
    model (where a weight is read once per forward) instead of from the L2 its previous call
    filled. ``copies`` is known once ``make_state`` has run; at most ``most`` (the calls captured
    in one graph: more copies than calls would never be read).

    ``keep(first, fresh)``, when given, returns ``fresh`` with the inputs that are not rotated
    taken from ``first`` (every copy shares them), and ``rotated_bytes(state)`` counts the bytes
    of those that are; without them every input is rotated."""

    make_state: Callable[[Any], Any]
    call: Callable[[Any], Any]
    l2_bytes: int
    most: int = MAX_COPIES
    copies: int = 1
    keep: Callable[[Any, Any], Any] | None = None
    rotated_bytes: Callable[[Any], int] = tensor_bytes

    def make(self, device) -> list:
        first = self.make_state(device)
        self.copies = min(self.most, copies_for(self.rotated_bytes(first), self.l2_bytes))
        rest = [self.make_state(device) for _ in range(self.copies - 1)]
        keep = self.keep
        return [first] + ([keep(first, state) for state in rest] if keep is not None else rest)

    def rotated_call(self) -> Callable[[list], Any]:
        turn = itertools.count()
        return lambda states: self.call(states[next(turn) % len(states)])


def _accepts_argument(fn: Callable) -> bool:
    try:
        return len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):
        return True


class L2Flush:
    """Evicts the L2 cache: writes a buffer twice its size (one memset kernel)."""

    def __init__(self, device) -> None:
        import torch

        self.bytes = 2 * max(l2_cache_bytes(device), 1 << 20)
        self.buffer = torch.empty(self.bytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def host_sync(call: Callable[[], None]) -> str | None:
    """Why ``call`` synchronises with the host (``.item()``, ``nonzero``, a copy to the CPU),
    or None: such a call cannot be captured in a CUDA graph. Uses torch's sync debug mode."""
    import torch

    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    except RuntimeError as e:
        if "synchroniz" not in str(e):
            raise
        return str(e).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return None


def repair_generator(device) -> None:
    """A failed capture leaves the device's default random generator marked as capturing, so
    every later CUDA random draw fails ("Offset increment outside graph capture"): give it a
    fresh state with the same seed."""
    import torch

    try:
        generator = torch.cuda.default_generators[device.index or 0]
        fresh = torch.Generator(device=device)
        fresh.manual_seed(generator.initial_seed())
        generator.graphsafe_set_state(fresh.graphsafe_get_state())
    except (AttributeError, RuntimeError) as e:  # an older torch: say what may follow
        log.warning("could not reset the CUDA random generator after a failed capture (%s)", e)


class Captured:
    """``unroll`` calls of ``call(state)``, captured into one CUDA graph when the device is a GPU.

    Built in ``build`` (the phase's setup) and freed in ``release`` (its teardown), so a pipeline
    holds one stage's tensors and graph at a time.

    Args:
        make_state: allocates the call's inputs and outputs on the device it is given.
        call: launches the work on ``state``; must not synchronise.
        unroll: calls per graph (per phase step).
        device: a torch device.
        before_each: optional call captured before each call (an L2 flush).
        warmup_calls: eager calls before capture (cuBLAS/cuDNN pick and cache their kernels).
        check_sync: look for a host synchronisation in an eager call before capturing (and run
            eagerly if there is one). ``False`` for code that synchronises only when it is not
            being captured (transformers checks its masks on the host unless a stream captures):
            the capture is tried, and a failed one falls back as well.
        capture_error_mode: ``torch.cuda.graph``'s: ``global`` (the default) or ``thread_local``,
            for calls with collectives, where the process group's own threads keep calling CUDA
            while this one captures.
    """

    def __init__(
        self,
        make_state: Callable[[Any], Any],
        call: Callable[[Any], Any],
        unroll: int,
        device,
        before_each: Callable[[], None] | None = None,
        warmup_calls: int = 3,
        check_sync: bool = True,
        capture_error_mode: str = "global",
    ) -> None:
        self.make_state = make_state
        self.capture_error_mode = capture_error_mode
        self.check_sync = check_sync
        self.call = call
        self.unroll = unroll
        self.device = device
        self.before_each = before_each
        self.warmup_calls = warmup_calls
        self._run: Callable[[], None] = _not_built
        self._keep: list = []
        #: why the calls run eagerly on a GPU (a failed capture), or None
        self.fallback: str | None = None
        #: reads of device values the graph has fixed as the eager calls made them (host_reads.py)
        self.fixed_reads = 0

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def build(self) -> None:
        import torch

        state = self.make_state(self.device)
        call, before, unroll = self.call, self.before_each, self.unroll

        def once() -> None:
            if before is not None:
                before()
            call(state)

        with torch.inference_mode(False), torch.no_grad():
            if not self.on_gpu:
                self._keep = [state]
                self._run = _repeated(once, unroll)
                return
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(self.warmup_calls):
                    once()
                syncs = host_sync(once) if self.check_sync else None
            self._join(stream)
            if syncs:  # a capture would fail, and a failed capture harms later CUDA random numbers
                if not self._capture_fixed(state, once, stream):
                    self._eager(state, once, f"eager: the call synchronises with the host ({syncs[:120]})")
                return
            failed = self._capture(state, once)
            if failed is not None and not self._capture_fixed(state, once, stream):
                self._eager(state, once, f"eager: CUDA graph capture failed ({failed[:160]})")

    def _join(self, stream) -> None:
        import torch

        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)

    def _capture(self, state, once: Callable[[], None]) -> str | None:
        """Capture ``unroll`` calls of ``once``; ``None``, or why the capture failed."""
        import torch

        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode=self.capture_error_mode):
                for _ in range(self.unroll):
                    once()
        except Exception as e:  # what the host-sync check does not see
            torch.cuda.synchronize(self.device)
            repair_generator(self.device)
            return f"{type(e).__name__}: {e}"
        self._keep = [state, graph]
        self._run = graph.replay
        return None

    def _capture_fixed(self, state, once: Callable[[], None], stream) -> bool:
        """A call that reads device values on the host: capture it with those reads fixed as two
        more eager calls made them, when both made the same (``host_reads.py``). False: it
        cannot be (the reads change from call to call, or it synchronises otherwise)."""
        import torch

        from .capture_view import seen_as_captured

        reads = HostReads()
        with torch.cuda.stream(stream):
            with seen_as_captured():  # the path the capture takes, where libraries take another
                for _ in range(2):
                    reads.recording(once)

            def fixed() -> None:
                reads.replaying(once)

            still = host_sync(fixed) if reads.static and self.check_sync else None
        self._join(stream)
        if not reads.static or still or self._capture(state, fixed) is not None:
            return False
        self.fixed_reads = reads.reads
        log.info("captured with %d read(s) of device values fixed as the eager calls made them", reads.reads)
        return True

    def _eager(self, state, once: Callable[[], None], why: str) -> None:
        self.fallback = why
        log.warning("%s", why)
        self._keep = [state]
        self._run = _repeated(once, self.unroll)

    def step(self) -> None:
        self._run()

    def sync(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize(self.device)

    def release(self) -> None:
        self._keep = []
        self._run = _not_built
        if self.on_gpu:
            import torch

            torch.cuda.empty_cache()

    def phase(self, name: str, work: Mapping[str, float] | None = None) -> Phase:
        return Phase(
            name=name,
            step=self.step,
            sync=self.sync,
            iterations_per_step=self.unroll,
            setup=self.build,
            teardown=self.release,
            work=dict(work or {}),
            note="" if self.on_gpu else CPU_NOTE,
        )


def _repeated(once: Callable[[], None], times: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            once()

    return run


def _not_built() -> None:
    raise WorkloadError("a captured call was stepped before its phase's setup built it")


#: options every graph-captured workload has
GRAPH_OPTIONS = (
    Option("unroll", "int", 100, "calls captured per CUDA graph (one replay is one step)", minimum=1),
    Option("cold", "bool", False, "flush L2 before every call and subtract a flush-only graph's cost"),
    Option("device", "str", "auto", "cuda, cuda:N, cpu or auto (CUDA if available)"),
)


def phase_medians(result, phase: str) -> tuple[float, float, float]:
    """Median time per call, energy per call and mean power of a phase on the first primary
    channel (energy and power are NaN in timing-only runs). Units: s, J, W."""
    import math

    summaries = [s for s in result.primary_summaries() if s.phase == phase]
    if not summaries:
        return math.nan, math.nan, math.nan
    s = summaries[0]
    return s.time_per_iter_s.median, s.energy_per_iter_j.median, s.mean_power_w.median


class GraphKernelWorkload(Workload):
    """A kernel: ``setup(device)`` allocates, ``capture(state)`` launches (no allocation);
    captured ``unroll`` times into one CUDA graph and replayed.

    Python API: ``GraphKernel("add_relu", setup, capture, unroll=100)``. Built-in kernels subclass
    it and implement ``make_state`` and ``launch``.
    """

    DESCRIPTION = "a kernel captured unroll times in a CUDA graph and replayed"
    OPTIONS: ClassVar[Sequence[Option]] = GRAPH_OPTIONS

    def __init__(
        self,
        name: str | None = None,
        setup: Callable[..., Any] | None = None,
        capture: Callable[[Any], Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        extras.check("torch", f"workload {self.name!r}")  # before anything starts
        self._setup_fn = setup
        self._capture_fn = capture
        if type(self) is GraphKernelWorkload and (setup is None or capture is None):
            raise OptionError(
                "GraphKernel needs setup (allocates on the device) and capture (launches the kernel)"
            )
        self.device: torch.device | None = None

    # -- what a kernel is ---------------------------------------------------------------------
    def make_state(self, device) -> Any:
        assert self._setup_fn is not None  # checked in __init__; subclasses override this
        if _accepts_argument(self._setup_fn):
            return self._setup_fn(device)
        return self._setup_fn()

    def launch(self, state: Any) -> Any:
        assert self._capture_fn is not None  # checked in __init__; subclasses override this
        return self._capture_fn(state)

    def work(self) -> Mapping[str, float]:
        """Work per call by unit (``flop``, ``bytes``) for per-unit figures."""
        return {}

    # -- workload -----------------------------------------------------------------------------
    def setup(self) -> None:
        self.device = torch_device(self.options["device"], self.context)

    def phases(self) -> Sequence[Phase]:
        unroll, cold = self.options["unroll"], self.options["cold"]
        assert self.device is not None  # set by setup
        flush = L2Flush(self.device) if cold and self.device.type == "cuda" else None
        kernel = Captured(self.make_state, self.launch, unroll, self.device, before_each=flush)
        phases = [kernel.phase(self.name, self.work())]
        if flush is not None:
            flush_only = Captured(
                lambda device: None, lambda state: None, unroll, self.device, before_each=flush
            )
            phases.append(flush_only.phase(f"{self.name} (L2 flush only)"))
        return phases

    def derive(self, result) -> Sequence[DerivedTable]:
        if not self.options["cold"] or self.device is None or self.device.type != "cuda":
            return ()
        t, e, _ = phase_medians(result, self.name)
        tf, ef, _ = phase_medians(result, f"{self.name} (L2 flush only)")
        return [
            DerivedTable(
                "cold",
                f"{self.name} with a cold L2 (flush subtracted)",
                [
                    {
                        "kernel": self.name,
                        "latency_s": t - tf,
                        "energy_j": e - ef,
                        "with_flush_latency_s": t,
                        "flush_latency_s": tf,
                    }
                ],
                note="per call: the flush+kernel graph minus the flush-only graph (medians over trials)",
            )
        ]

    def info(self) -> Mapping[str, Any]:
        import torch

        device = self.device
        out: dict[str, Any] = {"unroll": self.options["unroll"], "cold": self.options["cold"]}
        if device is not None:
            out["device"] = str(device)
            if device.type == "cuda":
                out["gpu"] = torch.cuda.get_device_name(device)
                out["l2_bytes"] = l2_cache_bytes(device)
                out["execution"] = "cuda graph"
            else:
                out["execution"] = CPU_NOTE
        out["torch"] = torch.__version__
        return out


#: the Python API name
GraphKernel = GraphKernelWorkload
