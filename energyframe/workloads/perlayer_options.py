"""The ``per-layer`` wrapper's name and options, declared apart from the wrapper (``perlayer``),
which imports them: a named model (``models``) given one of them points at the wrapper without
importing it.
"""

from __future__ import annotations

from ..options import Option

#: the registered name of the wrapper
PER_LAYER = "per-layer"

GRANULARITY = Option(
    "granularity",
    "choice",
    "auto",
    "per-layer units: leaf modules, the model's blocks, or auto (blocks when the launch gaps that "
    "leaf units leave out would be more than 1 % of the forward; the run says which and why)",
    choices=("leaf", "block", "auto"),
)
VALIDATE = Option("validate", "bool", False, "per-layer: also measure the whole model and compare")
L2 = Option(
    "l2",
    "choice",
    "rotate",
    "per-layer: rotate copies of each layer's weights (more than the L2) so "
    "they come from memory as in the model, or keep one copy (warm)",
    choices=("rotate", "warm"),
)
UNROLL = Option("unroll", "int", 100, "per-layer: calls captured per CUDA graph", minimum=1)
WINDOW_S = Option(
    "window_s",
    "float",
    None,
    "per-layer: each unit's window in seconds, its replays per window counted from its replay time "
    "timed right after capture (no calibration loop); not set: the run calibrates each unit to "
    "its window (--min-window)",
    minimum=1e-3,
)
LEAD_S = Option(
    "lead_s",
    "float",
    0.0,
    "per-layer, with window_s: seconds each unit replays, unmeasured, before its first window "
    "(so that window does not open on a load step)",
    minimum=0,
)
PREPARE = Option(
    "prepare",
    "choice",
    "each",
    "per-layer: capture each unit just before it is measured, or every unit ahead of the first "
    "window (ahead: no idle capture between units' windows; holds every graph at once, captures "
    "the rest one by one when GPU memory runs low)",
    choices=("each", "ahead"),
)
ACTIVATIONS = Option(
    "activations",
    "choice",
    "reuse",
    "per-layer: each call of a unit reads the same inputs (reuse), or copies of them totalling more "
    "than twice the L2 in turn (rotate)",
    choices=("reuse", "rotate"),
)
KERNEL_GAPS = Option(
    "kernel_gaps",
    "bool",
    False,
    "per-layer, with validate: add the launch gap between kernels, g = (T - B)/K, measured on the "
    "whole model's graph (profiled after its windows in every validated GPU run), to units whose "
    "graph repeats one kernel",
)
#: options of the wrapper; every other key of a per-layer spec belongs to the model
OWN_OPTIONS = (
    Option(
        "model",
        "str",
        required=True,
        help="a model workload (resnet50, vit_b_16, torchvision, timm, hf, torch ...); its own options "
        "(batch, dtype ...) go beside this one",
    ),
    GRANULARITY,
    VALIDATE,
    L2,
    UNROLL,
    WINDOW_S,
    LEAD_S,
    PREPARE,
    ACTIVATIONS,
    KERNEL_GAPS,
)
