"""Errors raised by energyframe. The CLI prints ``Error: <message>`` and exits with ``exit_code``."""

from __future__ import annotations


class EnergyFrameError(Exception):
    """Base class of every error energyframe raises on purpose."""

    exit_code = 1


class UsageError(EnergyFrameError):
    """The user asked for something that does not exist or is malformed; nothing was started."""

    exit_code = 2


class PluginNotFoundError(UsageError):
    """No plugin of that kind has that name."""


class OptionError(UsageError):
    """A plugin option is unknown or its value is invalid."""


class PluginLoadError(EnergyFrameError):
    """A plugin is registered but its module failed to import."""


class PowerSourceError(EnergyFrameError):
    """A power source could not start, failed while acquiring, or could not stop cleanly."""


class WorkloadError(EnergyFrameError):
    """A workload failed to set up or to run."""


class StoreError(EnergyFrameError):
    """A run directory is missing, unreadable, or of an unknown format version."""


class RunInterrupted(EnergyFrameError):
    """The run was stopped by SIGINT or SIGTERM; what was measured so far was saved."""

    exit_code = 130


class DistributedError(EnergyFrameError):
    """The ranks of a run could not go on together: one failed, stopped answering, or went
    another way; every rank stops, and rank 0 saves what was measured."""


class ServerError(EnergyFrameError):
    """The server a load was meant for does not answer, or answered no request of it."""


class ReporterError(EnergyFrameError):
    """A reporter failed or did not return; the run itself was saved before it ran."""
