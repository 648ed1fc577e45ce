"""Provenance: what ran where, for run.json and ``energyframe list`` (nothing is imported).

The one place that knows how to describe the host, the library versions, and the package a
plugin comes from (pyperf collects its metadata the same way, in one module).
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import platform
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

LIBRARIES = (
    "energyframe",
    "numpy",
    "pandas",
    "fastparquet",
    "pyarrow",
    "click",
    "rich",
    "stevedore",
    "torch",
    "torchvision",
    "transformers",
    "nvidia-ml-py",
    "pyserial",
    "prometheus-client",
    "timm",
    "matplotlib",
    "plotly",
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


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> Mapping[str, list[str]]:
    """Every installed top-level package and its distributions: a scan of every installed
    package's file list (seconds where many are installed), so it is done once per process and
    only when ``_named_distribution`` finds nothing (``registry.refresh`` forgets it)."""
    return md.packages_distributions()


def _top_levels(dist: md.Distribution) -> set[str]:
    """The top-level packages one distribution provides: its ``top_level.txt``, else its files."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    return {f.parts[0].removesuffix(".py") for f in dist.files or () if f.parts}


@functools.cache
def _named_distribution(top: str) -> str | None:
    """The distribution named after package ``top`` (``energyframe``; ``energyframe_wattsup``
    for ``energyframe-wattsup``), if it provides ``top``: one metadata read instead of a scan."""
    try:
        dist = md.distribution(top)
    except (md.PackageNotFoundError, ValueError):
        return None
    return dist.metadata["Name"] if top in _top_levels(dist) else None


def plugin_distribution(cls: type) -> tuple[str | None, str | None]:
    """The installed distribution (name, version) that provides ``cls``'s top-level package."""
    top = cls.__module__.split(".")[0]
    named = _named_distribution(top)
    if named is not None:
        return named, distribution_version(named)
    for dist in _packages_distributions().get(top, []):
        return dist, distribution_version(dist)
    return None, None


def entry_point_distribution(ep: md.EntryPoint) -> tuple[str | None, str | None]:
    """The distribution that registers entry point ``ep`` (stevedore's cached entry points lack
    it, so it is looked up again among the live ones)."""
    for candidate in md.entry_points(group=ep.group):
        dist = getattr(candidate, "dist", None)
        if candidate.name == ep.name and candidate.value == ep.value and dist is not None:
            return dist.metadata["Name"], dist.version
    return None, None


def plugin_record(plugin: Any) -> dict[str, Any]:
    """A plugin instance as run.json keeps it: name, class, package, version, options."""
    dist, version = plugin_distribution(type(plugin))
    return {
        "name": plugin.name,
        "class": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "distribution": dist,
        "version": version,
        "options": plugin.options,
    }


def _safe_info(plugin: Any) -> dict[str, Any]:
    try:
        return dict(plugin.info())
    except Exception as e:  # a plugin's description must never lose the run
        return {"error": f"{type(e).__name__}: {e}"}


def source_record(source: Any, channels: Sequence[Any]) -> dict[str, Any]:
    """A power source as run.json keeps it: the plugin, what it measured, its channels."""
    return {**plugin_record(source), "info": _safe_info(source), "channels": [c.to_json() for c in channels]}


def workload_record(workload: Any) -> dict[str, Any]:
    """A workload as run.json keeps it, with what it says about the work."""
    return {**plugin_record(workload), "info": _safe_info(workload)}


def run_provenance() -> Mapping[str, Any]:
    """This process (its id: a reader tells a run that died from one still going), its command
    line, the host and the library versions."""
    return {
        "pid": os.getpid(),
        "command_line": list(sys.argv),
        "host": host_info(),
        "versions": library_versions(),
    }


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
