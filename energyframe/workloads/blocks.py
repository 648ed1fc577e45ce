"""The blocks of a model nobody described: the repeated structure ``granularity=block`` measures.

A named model lists its blocks (``BLOCKS``: ResNet's ``Bottleneck``, ViT's ``EncoderBlock``); a
model given by name or by code (``torchvision:``, ``timm:``, ``hf:``, ``torch:factory=``,
``ef.Model``) has them found here, from the module tree alone:

- a block is a module of its own class (not a container: ``Sequential``, ``ModuleList``,
  ``ModuleDict`` and their subclasses, such as torchvision's ``Conv2dNormActivation``) with
  children of its own (a leaf is measured as a leaf anyway);
- it repeats: at least two instances of its class sit side by side in one container, as
  networks are written (``layers = ModuleList(DecoderLayer(...) for ...)``,
  ``Sequential(*[Bottleneck(...) ...])``). Two modules of one class that a parent holds as
  attributes (a block's ``bn1`` and ``bn2``) are parts, not blocks; a network that keeps its
  blocks as attributes (timm's RegNet: ``b1``, ``b2``, ...) has none found. A module that occurs once per block (an
  attention, a squeeze-excitation) is not a block of its own;
- when one block class holds another (timm's ``ConvNeXtStage`` holds ``ConvNeXtBlock``), the
  inner one is taken: finer units, and identical ones that are measured once and counted.

A mixture of experts (a ``ModuleList`` of expert MLPs inside each decoder layer) therefore
gets the experts as blocks; ``blocks=`` names the classes instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FoundBlocks:
    """The block classes of a model and how many modules of each it holds."""

    names: tuple[str, ...]
    counts: tuple[tuple[str, int], ...]
    how: str  # "found" or "asked for"

    def describe(self) -> str:
        """``found: CNBlock x18`` (or ``none found``)."""
        if not self.names:
            return f"{self.how}: none" if self.how != "found" else "none found (no repeated module class)"
        listed = ", ".join(f"{name} x{n}" for name, n in self.counts)
        return f"{self.how}: {listed}"


def _is_container(module: Any) -> bool:
    import torch.nn as nn

    return isinstance(module, (nn.Sequential, nn.ModuleList, nn.ModuleDict))


def _repeated_classes(model: Any) -> set[str]:
    """Classes of which some container holds at least two modules side by side."""
    repeated: set[str] = set()
    for parent in model.modules():
        if not _is_container(parent):
            continue
        siblings = Counter(
            type(child).__name__
            for child in parent.children()
            if not _is_container(child) and next(iter(child.children()), None) is not None
        )
        repeated.update(name for name, n in siblings.items() if n >= 2)
    return repeated


def find_blocks(model: Any) -> FoundBlocks:
    """The repeated block classes of ``model`` (see the module's docstring), innermost first."""
    candidates = _repeated_classes(model)
    holds_another = set()
    for module in model.modules():
        name = type(module).__name__
        if name not in candidates or name in holds_another:
            continue
        if any(type(sub).__name__ in candidates - {name} for sub in list(module.modules())[1:]):
            holds_another.add(name)
    names = sorted(candidates - holds_another)
    return FoundBlocks(tuple(names), _counts(model, names), "found")


def asked_blocks(model: Any, names: tuple[str, ...]) -> FoundBlocks:
    """The classes ``blocks=`` named, with how many modules of each the model holds."""
    return FoundBlocks(tuple(names), _counts(model, names), "asked for")


def _counts(model: Any, names: list[str] | tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    counts = Counter(type(m).__name__ for m in model.modules())
    return tuple((name, counts.get(name, 0)) for name in names)
