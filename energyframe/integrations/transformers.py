"""``EnergyCallback`` for the Hugging Face ``transformers.Trainer``: a window per optimizer step
and per evaluation, their energy added to the Trainer's logs, the run saved at the end::

    from energyframe.integrations.transformers import EnergyCallback

    trainer = Trainer(model, args, train_dataset=..., callbacks=[EnergyCallback(power="nvml")])
    trainer.train()  # logs gain energy/step_j, energy/step_sample_j, energy/step_power_w, ...

A step's window opens at ``on_step_begin`` (before its first micro-batch: with gradient
accumulation one optimizer step spans several) and closes at ``on_step_end`` (after the optimizer
step); an evaluation's opens when the Trainer decides to evaluate and closes at ``on_evaluate``.
The figures go into ``logs`` at ``on_log``, so every tracker the Trainer reports to (TensorBoard,
MLflow, W&B, ...) logs them with its own; the callback puts itself before them.
docs/integrations.md lists every key.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..kit.extras import require
from ..kit.registry import PowerArg
from ..results.result import COMPLETE, RunResult
from ..results.store import default_run_dir
from .steps import EVAL, STEP, TrainingMeter

_transformers = require("transformers", "energyframe.integrations.transformers")
from transformers import TrainerCallback  # noqa: E402
from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback  # noqa: E402

log = logging.getLogger("energyframe")

#: a key the Trainer's last log (the end of training) carries: then the callback waits for the
#: energy of the last windows, as training is over
FINAL_LOG_KEY = "train_runtime"


class EnergyCallback(TrainerCallback):
    """Measures every optimizer step and evaluation of a ``transformers.Trainer``.

    Args:
        power: as ``ef.measure`` takes it (``"auto"``: NVML on a GPU machine).
        out: the run directory; default ``<output_dir>/energyframe/<UTC time>-train``.
        sync: device sync at window edges (``"auto"``: CUDA when in use).
        channel: the channel whose energy is logged; default the first primary channel and the
            other primary channels of its scope (every GPU this process measures).

    Attributes:
        result: the saved run once training ended (rank 0: every rank's), else ``None``.
        run_dir: where it is saved.
    """

    def __init__(
        self,
        power: str | Sequence[PowerArg] = "auto",
        out: Path | str | None = None,
        sync: str | Callable[[], None] | None = "auto",
        channel: str | None = None,
    ) -> None:
        self.meter = TrainingMeter(power, out, sync, channel)
        self._micro_batches = 0
        self._eval_batches = 0
        self._placed = False

    @property
    def result(self) -> RunResult | None:
        return self.meter.result

    @property
    def run_dir(self) -> Path | None:
        return self.meter.run_dir

    # -- before the trackers -----------------------------------------------------------------
    def on_init_end(self, args, state, control, **kwargs):
        self._go_first()

    def _go_first(self) -> None:
        """Stand right after the Trainer's flow callback, before the trackers' callbacks, so
        that what ``on_log`` adds reaches them. The Trainer calls its callbacks from
        ``CallbackHandler.call_event``, which hands them no reference to itself: it is read from
        the calling frame."""
        frame = inspect.currentframe()
        handler = None
        while frame is not None and handler is None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, CallbackHandler):
                handler = candidate
            frame = frame.f_back
        del frame
        self._placed = True
        if handler is None or self not in handler.callbacks:
            log.warning(
                "warning: EnergyCallback could not find the Trainer's callbacks: trackers listed before it "
                "do not log the energy figures (the Trainer's log_history has them)"
            )
            return
        callbacks = handler.callbacks
        flows = [i for i, c in enumerate(callbacks) if isinstance(c, DefaultFlowCallback)]
        callbacks.remove(self)
        callbacks.insert(flows[0] + 1 if flows else 0, self)

    # -- the run -----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if not self._placed:  # added after the Trainer was made (trainer.add_callback)
            self._go_first()
        if self.meter.result is not None:  # trained before: this run is measured on its own
            self.meter = self.meter.fresh()
        if self.meter.m is None:
            self.meter.start(default_run_dir("train", root=Path(args.output_dir) / "energyframe"))

    def on_train_end(self, args, state, control, **kwargs):
        self.meter.finish()

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult | None:
        """Save the run now (``on_train_end`` does; training that raised leaves it to you, or to
        the interpreter's exit, which saves it incomplete)."""
        return self.meter.finish(status, reason)

    # -- windows -----------------------------------------------------------------------------
    def on_step_begin(self, args, state, control, **kwargs):
        self._micro_batches = 1
        self.meter.begin(STEP)

    def on_substep_end(self, args, state, control, **kwargs):
        self._micro_batches += 1  # a micro-batch of gradient accumulation that did not step

    def on_step_end(self, args, state, control, **kwargs):
        self.meter.end(STEP, samples=self._micro_batches * args.per_device_train_batch_size)
        self._maybe_evaluate(control)

    def on_epoch_end(self, args, state, control, **kwargs):
        self._maybe_evaluate(control)

    def _maybe_evaluate(self, control) -> None:
        # the flow callback, before this one, has decided: the Trainer evaluates next
        if control.should_evaluate and not self.meter.is_open(EVAL):
            self._eval_batches = 0
            self.meter.begin(EVAL)

    def on_prediction_step(self, args, state, control, **kwargs):
        self._eval_batches += 1

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        size = _dataset_size(kwargs.get("eval_dataloader"))
        if size is not None:  # the whole set, which the ranks share: counted once, by rank 0
            samples = size if self.meter.is_root else 0
        else:
            samples = self._eval_batches * args.per_device_eval_batch_size
        self.meter.end(EVAL, samples=samples)

    # -- logs --------------------------------------------------------------------------------
    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or not self.meter.running:
            return
        final = FINAL_LOG_KEY in logs  # training is over: waiting holds nothing up
        keys = self.meter.log_keys(self.meter.collect(wait=final))
        logs.update(keys)
        if state.log_history:  # the Trainer appended a copy of logs before calling its callbacks
            state.log_history[-1].update(keys)


def _dataset_size(loader: Any) -> int | None:
    """The size of the evaluation set, where its loader's dataset knows it."""
    try:
        n = len(loader.dataset)
    except (AttributeError, TypeError):
        return None
    return n if isinstance(n, int) and n >= 0 else None
