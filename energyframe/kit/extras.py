"""Optional dependencies: the packages behind the ``models`` and ``plots`` extras.

``pip install energyframe`` brings what measures commands and power (no torch); GPU kernels,
traces and models built here need ``energyframe[torch]``, the models by name
``energyframe[models]`` (torch, torchvision, transformers, timm), PNGs need ``energyframe[plots]``
(matplotlib), the HTML report ``energyframe[report]`` (plotly, jinja2), ``energyframe serve-bench``
``energyframe[serve]`` (httpx), the training callbacks and the trackers' reporters
``energyframe[integrations]`` (transformers, accelerate, lightning, mlflow, tensorboard, wandb).
Code that needs one of them asks here, so a missing package is one line that
names the extra to install, never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from types import ModuleType

from ..errors import EnergyFrameError, UsageError

log = logging.getLogger("energyframe")

#: the extra that installs each optional module
EXTRA_OF = {
    "torch": "torch",
    "torchvision": "models",
    "transformers": "models",
    "timm": "models",
    "matplotlib": "plots",
    "plotly": "report",
    "jinja2": "report",
    "httpx": "serve",
    "accelerate": "integrations",
    "lightning": "integrations",
    "pytorch_lightning": "integrations",
    "mlflow": "integrations",
    "tensorboard": "integrations",
    "wandb": "integrations",
}


def install_command(extra: str) -> str:
    """The pip command that installs ``extra``."""
    return f"pip install 'energyframe[{extra}]'"


def installed(module: str) -> bool:
    """Whether ``module`` can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a broken one
        return False


def missing_message(module: str, feature: str) -> str:
    """``"<feature> needs <module>: pip install 'energyframe[<extra>]'"``."""
    return f"{feature} needs {module}: {install_command(EXTRA_OF[module])}"


def check(module: str, feature: str, error: type[EnergyFrameError] = UsageError) -> None:
    """Raise ``error`` naming the extra when ``module`` is not installed (nothing is imported,
    so a plugin can call this before anything starts).

    Args:
        module: a key of ``EXTRA_OF`` (``"torchvision"``).
        feature: what needs it, as the message starts (``"workload 'resnet50'"``).
    """
    if not installed(module):
        raise error(missing_message(module, feature))


def require(module: str, feature: str, error: type[EnergyFrameError] = UsageError) -> ModuleType:
    """Import ``module``, or raise ``error`` with one line that names the extra to install.

    A module that is installed but fails to import (torchvision built for another torch raises
    ``RuntimeError: operator torchvision::nms does not exist``) is reported with its cause.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.split(".")[0] == module.split(".")[0]:
            raise error(missing_message(module, feature)) from None
        raise error(_broken(module, feature, e)) from e
    except Exception as e:  # installed, but it does not import: say why
        raise error(_broken(module, feature, e)) from e


def optional(module: str, product: str) -> ModuleType | None:
    """Import ``module`` for a by-product (a PNG beside the numbers), or warn that ``product`` is
    not written and which extra would write it, and return ``None``."""
    try:
        return require(module, "it")
    except EnergyFrameError as e:
        log.warning("%s not written: %s", product, e)
        return None


#: why an installed module may fail to import, where a usual reason is known
BROKEN_HINT = {"torchvision": "torchvision must be the release built for the installed torch"}


def _broken(module: str, feature: str, error: BaseException) -> str:
    hint = BROKEN_HINT.get(module)
    return (
        f"{feature} needs {module}, which is installed but fails to import: "
        f"{type(error).__name__}: {error}" + (f" ({hint})" if hint else "")
    )
