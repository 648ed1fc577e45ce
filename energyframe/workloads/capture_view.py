"""A model's forward as a CUDA graph's capture sees it, run eagerly.

Some libraries take another path while a CUDA stream captures than when it does not, because a
capture forbids reading a value on the host. transformers is the case that matters: with no
attention mask (or an all-ones one), an eager forward checks on the host that nothing is padded
and gives SDPA no mask, which then runs its flash kernel; under a capture it cannot check, so it
builds the mask (``arange``, ``ge``, ``expand``) and every attention layer gets it (SDPA turns it
into a bias with ``where`` and runs another kernel). transformers 5.17 does this for every encoder
(BERT, DistilBERT, ...), 5.24 for encoder-decoders (BART) and for any model given a padding mask.

A per-layer run records its units' inputs from one eager forward and measures the units and the
whole model as CUDA graphs. Recorded eagerly, a BERT layer got no mask and ran the flash kernel
alone, while the whole model's graph built the mask and ran every layer with it: the units
measured a different attention and left the mask's kernels out. ``seen_as_captured`` runs that
recording forward with ``torch.cuda.is_current_stream_capturing()`` answering True, so the
library takes the path the graphs take and the units get the masks the model's graph uses.
Nothing else changes: the ops still run eagerly, on whatever device the tensors are on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def _capturing() -> bool:
    return True


@contextlib.contextmanager
def seen_as_captured(active: bool = True) -> Iterator[None]:
    """While the block runs (and ``active``), ``torch.cuda.is_current_stream_capturing()`` says
    True, as it does inside ``torch.cuda.graph``. Restored on the way out, exceptions too."""
    if not active:
        yield
        return
    import torch
    import torch.cuda.graphs as graphs

    before = (torch.cuda.is_current_stream_capturing, graphs.is_current_stream_capturing)
    torch.cuda.is_current_stream_capturing = _capturing
    graphs.is_current_stream_capturing = _capturing
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing, graphs.is_current_stream_capturing = before
