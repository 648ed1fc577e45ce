"""CUDA source kernels swept over parameters: ``ef.load_kernel``, ``ef.sweep``, ``energyframe
sweep`` and ``energyframe merge`` (docs/kernel-sweeps.md)."""
