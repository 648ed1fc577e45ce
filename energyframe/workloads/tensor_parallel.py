"""A Llama-shaped language model measured as a serving stack runs it: split over ``tp`` ranks
(``sharded_llama.py``), its prefill and its decode each one CUDA graph replay (collectives inside),
per token on each GPU and over all of them, beside the weight-read floor of a decode token.

``vicuna-7b`` and ``hf:arch=<a Llama-shaped config>,tp=N`` are measured through this: they build
the transformers model (full weights on every rank), and ``TensorParallelLM.build`` keeps this
rank's slice, checks its logits against the model's own on a few tokens, and the model is
dropped. Phases:

- ``prefill``: one forward over the prompt (``seq_len`` tokens), writing the key/value cache;
- ``decode``: ``new_tokens`` one-token steps after the prompt, greedy, each replay starting
  again from the prompt's cache (the prompt is run once, unmeasured, when the phase is set up).

``execution=graph`` (the default) captures each phase's step in a CUDA graph on a GPU; ``eager``
runs the same calls one by one (what ``energyframe trace`` profiles; on the CPU both are eager).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import WorkloadError
from ..model import DerivedTable, Phase
from .graph import Captured, device_sync
from .sharded_llama import CHECK_TOKENS, ShardedLlama, not_llama_shaped

#: memory bandwidth of a GPU by (a part of) its name, from the vendors' data sheets: the decode
#: floor is the weights a token reads over this. Longest match wins. Units: B/s.
MEMORY_BANDWIDTH_BPS = {
    "H200": 4.8e12,
    "GH200": 4.0e12,
    "H100 80GB HBM3": 3.35e12,
    "H100 NVL": 3.9e12,
    "H100 PCIe": 2.0e12,
    "A100-SXM4-80GB": 2.039e12,
    "A100 80GB PCIe": 1.935e12,
    "A100-SXM4-40GB": 1.555e12,
    "A100-PCIE-40GB": 1.555e12,
    "L40S": 0.864e12,
}


def memory_bandwidth_bps(gpu_name: str) -> float:
    """The data sheet's memory bandwidth of the GPU called ``gpu_name`` (NaN when unknown). Units: B/s."""
    matches = [key for key in MEMORY_BANDWIDTH_BPS if key in gpu_name]
    return MEMORY_BANDWIDTH_BPS[max(matches, key=len)] if matches else math.nan


def check_world(owner: str, tp: int, w: Any, device: str) -> None:
    """``tp`` ranks need as many processes (torchrun), and on a GPU as many GPUs.

    Raises:
        WorkloadError: the launcher started another number of processes, or there are fewer GPUs.
    """
    if w.world_size != tp:
        where = f"WORLD_SIZE is {w.world_size}" if w.launched else "WORLD_SIZE is not set"
        if tp == 1:
            raise WorkloadError(
                f"{owner}: tp=1 runs in one process, but {where}; run it without torchrun, or set tp={w.world_size}"
            )
        raise WorkloadError(
            f"{owner}: tp={tp} runs one process per rank, {tp} in all, but {where}; "
            f"run it under torchrun --nproc-per-node {tp}"
        )
    if tp > 1 and device in ("auto", "cuda"):
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (gpus or device == "cuda") and gpus < tp:
            raise WorkloadError(
                f"{owner}: tp={tp} needs {tp} GPUs, one per rank, but torch sees {gpus}; "
                "use device=cpu to run the ranks on the CPU"
            )


class TensorParallelLM:
    """This rank's slice of a Llama-shaped model and its measured phases.

    Args:
        owner: the workload's name, for messages.
        tp, rank, world_size: the split, and this rank in it.
        batch, seq_len, new_tokens: sequences, prompt tokens, tokens per decode.
        execution: ``graph`` or ``eager``.
    """

    def __init__(
        self, owner: str, tp: int, rank: int, batch: int, seq_len: int, new_tokens: int, execution: str
    ) -> None:
        self.owner, self.tp, self.rank = owner, tp, rank
        self.batch, self.seq_len, self.new_tokens = batch, seq_len, new_tokens
        self.execution = execution
        self.sharded: ShardedLlama | None = None
        self.ids: Any = None
        self.device: Any = None
        self.check_difference = math.nan
        self._parameters: int | None = None
        self._bytes_per_step: int | None = None
        self._captured: dict[str, Captured] = {}

    # -- set-up --------------------------------------------------------------------------------
    def build(self, model: Any, ids: Any) -> None:
        """Keep this rank's slice of ``model`` (full weights; dropped by the caller afterwards)
        and check it: its logits over the prompt's first tokens against the model's own.

        Raises:
            WorkloadError: the model is not Llama-shaped, does not split over ``tp``, or its
                slices do not give its logits.
        """
        why = not_llama_shaped(model)
        if why:
            raise WorkloadError(
                f"{self.owner}: {type(model).__name__} is not Llama-shaped ({why}); tp= splits Llama-shaped "
                "causal LMs (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, ...)"
            )
        self.device, self.ids = ids.device, ids
        try:
            sharded = ShardedLlama(model, self.tp, self.rank, self.batch, self.seq_len + self.new_tokens)
        except WorkloadError as e:
            raise WorkloadError(f"{self.owner}: {e}") from e
        difference = sharded.check_against(model, ids[:, :CHECK_TOKENS])
        self.check_difference = difference
        if not difference <= sharded.tolerance():
            raise WorkloadError(
                f"{self.owner}: the split {type(model).__name__} gives other logits than the model itself "
                f"({100 * difference:.3g} % apart on {CHECK_TOKENS} tokens): its layers are not Llama's "
                "(another norm, activation or attention), so tp= cannot split it"
            )
        self.sharded = sharded
        self._parameters = sharded.parameters()
        self._bytes_per_step = sharded.bytes_read_per_step()

    # -- the work ------------------------------------------------------------------------------
    def _model(self) -> ShardedLlama:
        if self.sharded is None:
            raise WorkloadError(f"{self.owner}: the model is not set up")
        return self.sharded

    def prefill(self):
        """One forward over the prompt (the cache written); the last position's logits."""
        import torch

        with torch.no_grad():
            return self._model().prefill(self.ids)

    def decode(self, n: int | None = None):
        """``n`` decode steps (default ``new_tokens``) after the prompt, which is run first and
        chooses the token the first step feeds. Returns the tokens the steps chose, ``batch x n``."""
        import torch

        model = self._model()
        n = self.new_tokens if n is None else n
        if n > self.new_tokens:
            raise WorkloadError(
                f"{self.owner}: {n} decode steps do not fit the key/value buffers, which hold the prompt "
                f"and new_tokens={self.new_tokens} more"
            )
        with torch.no_grad():
            model.prefill(self.ids)
            tokens = []
            for _ in range(n):  # each step feeds the token chosen before it and chooses the next
                model.decode_step()
                tokens.append(model.token.clone())
        return torch.cat(tokens, dim=1)

    def logits(self, ids=None):
        """Every position's logits for ``ids`` (default: the prompt), without the cache."""
        import torch

        with torch.no_grad():
            return self._model().forward(self.ids if ids is None else ids, keep_cache=False)

    # -- phases --------------------------------------------------------------------------------
    def work(self, mode: str) -> dict[str, float]:
        return {"tokens": float(self.batch * (self.seq_len if mode == "prefill" else self.new_tokens))}

    def phases(self, modes: Sequence[str], note: str = "") -> list[Phase]:
        """A phase per mode; with ``execution=graph`` each captures its step when it is set up."""
        return [self._phase(mode, note) for mode in modes]

    def captured(self, mode: str) -> Captured | None:
        """The graph of ``mode``'s step (``execution=graph``), built or not; replay profiles the
        first phase's to measure the launch gap between its kernels."""
        return self._captured.get(mode)

    def _calls(self, mode: str) -> tuple[Callable[[Any], Any], Callable[[Any], None]]:
        """(make_state, call) of one step of ``mode``: a prefill, or a whole decode."""
        model, n = self._model(), self.new_tokens

        if mode == "prefill":
            return (lambda device: None), (lambda state: model.prefill(self.ids))

        def make(device):
            import torch

            with torch.no_grad():
                model.prefill(self.ids)  # the prompt's cache, which every decode starts from
            return model.token.clone()  # the token the prompt chose

        def decode(first) -> None:
            model.restart(first)
            for _ in range(n):
                model.decode_step()

        return make, decode

    def _phase(self, mode: str, note: str) -> Phase:
        make, call = self._calls(mode)
        what = (
            f"a prompt of {self.seq_len} tokens"
            if mode == "prefill"
            else f"{self.new_tokens} greedy tokens on a KV cache of {self.seq_len}"
        )
        what += f", tp={self.tp}" + (f"; {note}" if note else "")
        if self.execution == "graph":
            captured = Captured(
                make, call, 1, self.device, capture_error_mode="thread_local" if self.tp > 1 else "global"
            )
            self._captured[mode] = captured
            phase = captured.phase(mode, self.work(mode))
            how = "cuda graph" if captured.on_gpu else "eager (no CUDA graph on the CPU)"
            return dataclasses.replace(phase, note=f"{how}; {what}")
        held: dict[str, Any] = {}

        def setup() -> None:
            held["state"] = make(self.device)

        def step() -> None:
            import torch

            with torch.no_grad():
                call(held.get("state"))

        return Phase(
            mode,
            step=step,
            sync=device_sync(self.device),
            setup=setup,
            teardown=held.clear,
            work=self.work(mode),
            note=f"eager; {what}",
        )

    def execution_of(self, mode: str) -> str:
        """How ``mode`` ran: ``cuda graph``, the reason it ran eagerly, or ``eager``."""
        captured = self._captured.get(mode)
        if captured is None:
            return "eager"
        if not captured.on_gpu:
            return "eager (cpu)"
        return captured.fallback or "cuda graph"

    def teardown(self) -> None:
        for captured in self._captured.values():
            captured.release()
        self.sharded = self.ids = None

    # -- reporting -----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "execution": self.execution,
            "logits_check_difference": self.check_difference,
            "parameters_on_this_rank": self._parameters,
            "weights_read_per_decode_step_bytes": self._bytes_per_step,
        }
        for mode in self._captured:
            out[f"{mode}_execution"] = self.execution_of(mode)
        gpu = self._gpu_name()
        if gpu:
            out["memory_bandwidth_bps"] = memory_bandwidth_bps(gpu)
        return out

    def _gpu_name(self) -> str:
        if self.device is None or getattr(self.device, "type", None) != "cuda":
            return ""
        import torch

        return torch.cuda.get_device_name(self.device)

    def floor_per_token_s(self) -> float:
        """The decode floor: the bytes of weights a token reads on this rank over its GPU's
        memory bandwidth (NaN off a known GPU). Units: s."""
        bandwidth = memory_bandwidth_bps(self._gpu_name())
        if not (self._bytes_per_step and math.isfinite(bandwidth)):
            return math.nan
        return self._bytes_per_step / bandwidth / self.batch

    def derive(self, result, world) -> Sequence[DerivedTable]:
        from . import distributed

        rows = tokens_table(result, self.device, self.tp, world, distributed)
        floor = self.floor_per_token_s()
        for row in rows:
            if row["phase"] == "decode":
                row["weights_read_per_token_bytes"] = (self._bytes_per_step or 0) / self.batch
                row["floor_latency_per_token_s"] = floor
                row["latency_over_floor"] = row["latency_per_token_s"] / floor if floor else math.nan
        if not rows:
            return ()
        return [
            DerivedTable(
                "tokens",
                f"{self.owner} tp={self.tp}: per token",
                rows,
                note="energy_per_token_j: this rank's GPU (its channel, else the first primary channel); "
                "all_gpus: the sum over every GPU this run measured; floor (decode): the weights one token "
                "reads on this rank over its GPU's memory bandwidth (data sheet)",
                display=(
                    "phase",
                    "rank",
                    "latency_per_token_s",
                    "floor_latency_per_token_s",
                    "energy_per_token_j",
                    "energy_per_token_j_all_gpus",
                    "gpus_measured",
                ),
            )
        ]


def tokens_table(result, device, tp: int, w: Any, distributed: Any) -> list[dict]:
    """Per phase: latency and energy per token, on this rank's GPU and summed over the GPUs
    the run measured."""
    own = distributed.own_channel(result, device)
    primary = list(result.meta.get("primary_channels", []))
    rows = []
    for phase in dict.fromkeys(s.phase for s in result.summaries):
        summaries = [s for s in result.summaries if s.phase == phase]
        tokens = (summaries[0].work or {}).get("tokens") if summaries else None
        if not tokens:
            continue
        rows.append(_token_row(phase, summaries, tokens, own=own, primary=primary, tp=tp, w=w))
    return rows


def _token_row(
    phase: str, summaries: list, tokens: float, *, own: str | None, primary: list[str], tp: int, w: Any
) -> dict:
    """One phase per token: on this rank's GPU (its own channel, else the first primary one,
    else the first summary's), and on each GPU the run measured and summed over them."""
    by_channel = {s.channel: s for s in summaries}
    mine = _rank_gpu(by_channel, own, primary) or summaries[0]
    gpus = [by_channel[c] for c in primary if c in by_channel and c.startswith("gpu")]
    row = {
        "phase": phase,
        "tp": tp,
        "rank": w.rank,
        "world_size": w.world_size,
        "tokens_per_iteration": tokens,
        "latency_per_token_s": mine.time_per_iter_s.median / tokens,
        "energy_per_token_j": mine.energy_per_iter_j.median / tokens,
        "channel": mine.channel,
        "energy_per_token_j_all_gpus": (
            sum(s.energy_per_iter_j.median for s in gpus) / tokens if gpus else math.nan
        ),
        "gpus_measured": len(gpus),
    }
    for s in gpus:
        row[f"energy_per_token_j_{s.channel}"] = s.energy_per_iter_j.median / tokens
    return row


def _rank_gpu(by_channel: dict, own: str | None, primary: list[str]) -> Any:
    """The summary on this rank's GPU's channel, else on the first primary channel there is
    (None when neither has one)."""
    return by_channel.get(own) or next((by_channel[c] for c in primary if c in by_channel), None)
