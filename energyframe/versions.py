"""What ran where: host, library and plugin versions for run.json (nothing is imported)."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import socket
import sys

LIBRARIES = (
    "energyframe",
    "numpy",
    "pandas",
    "pyarrow",
    "click",
    "rich",
    "stevedore",
    "torch",
    "torchvision",
    "transformers",
    "nvidia-ml-py",
    "pyserial",
)


def distribution_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        version = distribution_version(name)
        if version:
            out[name] = version
    return out


def plugin_distribution(cls: type) -> tuple[str | None, str | None]:
    """The installed distribution (name, version) that provides ``cls``'s top-level package."""
    top = cls.__module__.split(".")[0]
    for dist in md.packages_distributions().get(top, []):
        return dist, distribution_version(dist)
    return None, None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "python_executable": sys.executable,
    }
