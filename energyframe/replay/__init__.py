"""Trace capture, op replay and the prediction report (the kernel-replay tool)."""
