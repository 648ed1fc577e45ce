"""``EnergyCallback`` for Lightning's ``Trainer``: a window per optimizer step and per validation,
their energy written to the Trainer's loggers, the run saved at the end::

    from energyframe.integrations.lightning import EnergyCallback

    trainer = lightning.Trainer(max_epochs=3, callbacks=[EnergyCallback(power="nvml")])
    trainer.fit(model, data)  # the loggers get energy/step_j, energy/step_sample_j, ...

A step's window opens before the first batch of an optimizer step (with ``accumulate_grad_batches``
one step spans several) and closes after the batch whose optimizer step advanced
``trainer.global_step``; a validation's spans the validation epoch (the sanity check is left out).
Every ``log_every_n_steps`` optimizer steps, each validation's end and the end of training, the
figures whose energy is known go to every logger of the Trainer (``logger.log_metrics``).

Under DDP every rank measures its own GPU (``ef.measure``'s ranks), the figures are summed over
the ranks, and rank 0 saves one run directory with every rank's windows and their total.

The callback subclasses ``lightning.pytorch.Callback``, or ``pytorch_lightning.Callback`` where only
that package is installed; ``PLEnergyCallback`` is the ``pytorch_lightning`` one when both are.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import UsageError
from ..kit.extras import install_command
from ..kit.registry import PowerArg
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from ..results.store import default_run_dir
from .steps import EVAL, STEP, TrainingMeter

#: the packages Lightning ships as, in the order they are tried
PACKAGES = ("lightning.pytorch", "pytorch_lightning")


def _package(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class EnergyHooks:
    """The callback's hooks, on whichever Lightning package's ``Callback`` it subclasses.

    Args:
        power: as ``ef.measure`` takes it (``"auto"``: NVML on a GPU machine).
        out: the run directory; default ``<default_root_dir>/energyframe/<UTC time>-train``.
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
        super().__init__()
        self.meter = TrainingMeter(power, out, sync, channel)
        self._opened_at = 0
        self._step_samples = 0
        self._eval_samples = 0
        self._batch_size: Callable[[Any], int] | None = None

    @property
    def result(self) -> RunResult | None:
        return self.meter.result

    @property
    def run_dir(self) -> Path | None:
        return self.meter.run_dir

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult | None:
        """Save the run now (the end of training does)."""
        return self.meter.finish(status, reason)

    # -- the run -----------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self._batch_size = _batch_size_of(type(trainer).__module__)
        if self.meter.result is not None:  # fitted before: this fit is measured on its own
            self.meter = self.meter.fresh()
        if self.meter.m is None:  # every rank: DDP's process group is up by now
            self.meter.start(default_run_dir("train", root=Path(trainer.default_root_dir) / "energyframe"))

    def on_train_end(self, trainer, pl_module) -> None:
        # before the loggers are finalized; training is over, so waiting holds nothing up
        self._log(trainer, wait=True)
        self.meter.finish()

    def on_fit_end(self, trainer, pl_module) -> None:
        self.meter.finish()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.meter.running:
            self.meter.finish(INCOMPLETE, f"training raised {type(exception).__name__}: {exception}")

    # -- windows -----------------------------------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.meter.is_open(STEP):
            self._opened_at = trainer.global_step
            self._step_samples = 0
            self.meter.begin(STEP)
        self._step_samples += self._size(batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.meter.is_open(STEP) and trainer.global_step > self._opened_at:  # the optimizer stepped
            self.meter.end(STEP, samples=self._step_samples)
            if trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
                self._log(trainer)

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._eval_samples = 0
            self.meter.begin(EVAL)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if self.meter.is_open(EVAL):
            self._eval_samples += self._size(batch)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self.meter.is_open(EVAL):
            self.meter.end(EVAL, samples=self._eval_samples)
            self._log(trainer)

    # -- logs --------------------------------------------------------------------------------
    def _log(self, trainer, wait: bool = False) -> None:
        """The known figures to every logger (rank 0 writes; every rank takes part in the sums)."""
        if not self.meter.running:
            return
        keys = self.meter.log_keys(self.meter.collect(wait=wait))
        if keys and trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(keys, step=trainer.global_step)

    def _size(self, batch: Any) -> int:
        if self._batch_size is None:
            return 0
        try:
            return int(self._batch_size(batch))
        except Exception:  # a batch Lightning cannot size: its samples are not counted
            return 0


def _batch_size_of(trainer_module: str) -> Callable[[Any], int] | None:
    """Lightning's own ``extract_batch_size``, from the package the Trainer comes from."""
    root = "lightning.pytorch" if trainer_module.startswith("lightning.") else "pytorch_lightning"
    data = _package(f"{root}.utilities.data")
    return getattr(data, "extract_batch_size", None) if data is not None else None


def callback_class(package: str, name: str = "EnergyCallback") -> type:
    """``EnergyHooks`` on ``package``'s ``Callback`` (``lightning.pytorch`` or ``pytorch_lightning``),
    as this module's ``name`` (so that ``ddp_spawn`` can pickle it).

    Raises:
        UsageError: the package is not installed, naming the extra that installs it.
    """
    module = _package(package)
    if module is None:
        raise UsageError(
            f"energyframe.integrations.lightning needs {package.split('.')[0]}: {install_command('integrations')}"
        )
    namespace = {"__module__": __name__, "__qualname__": name, "__doc__": EnergyHooks.__doc__}
    return type(name, (EnergyHooks, module.Callback), namespace)


def _first_installed() -> str:
    for name in PACKAGES:
        if _package(name) is not None:
            return name
    return PACKAGES[0]


EnergyCallback = callback_class(_first_installed())


def __getattr__(name: str) -> Any:
    if name == "PLEnergyCallback":  # built on first use: pytorch_lightning beside lightning
        cls = callback_class("pytorch_lightning", name)
        globals()[name] = cls
        return cls
    raise AttributeError(name)
