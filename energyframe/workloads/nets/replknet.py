"""RepLKNet-31B (Ding et al., "Scaling Up Your Kernels to 31x31", CVPR 2022), inference form.

The deployed network: each conv + BatchNorm pair is merged into one biased conv, and each large
depthwise kernel is merged with its parallel 5x5 kernel, as the paper's structural
re-parameterisation does before inference. Channels 128/256/512/1024, depths 2/2/18/2, large
kernels 31/29/27/13, depthwise ratio 1, FFN ratio 4, 1000 classes. Random weights.
"""

from __future__ import annotations

import torch
from torch import nn

CHANNELS = (128, 256, 512, 1024)
DEPTHS = (2, 2, 18, 2)
KERNELS = (31, 29, 27, 13)


def conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """A conv with its BatchNorm merged in (hence the bias)."""
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=True)


class RepLKBlock(nn.Module):
    """BN -> 1x1 conv -> ReLU -> large depthwise conv -> ReLU -> 1x1 conv, plus the input."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.prelkb_bn = nn.BatchNorm2d(channels)
        self.pw1 = conv(channels, channels, 1)
        self.pw1_act = nn.ReLU()
        self.large_kernel = conv(channels, channels, kernel, groups=channels)
        self.lk_nonlinear = nn.ReLU()
        self.pw2 = conv(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pw1_act(self.pw1(self.prelkb_bn(x)))
        out = self.lk_nonlinear(self.large_kernel(out))
        return x + self.pw2(out)


class ConvFFN(nn.Module):
    """BN -> 1x1 conv (x4) -> GELU -> 1x1 conv, plus the input."""

    def __init__(self, channels: int, ratio: int = 4) -> None:
        super().__init__()
        self.preffn_bn = nn.BatchNorm2d(channels)
        self.pw1 = conv(channels, channels * ratio, 1)
        self.nonlinear = nn.GELU()
        self.pw2 = conv(channels * ratio, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pw2(self.nonlinear(self.pw1(self.preffn_bn(x))))


class Transition(nn.Module):
    """Between stages: 1x1 conv to the next width, then a 3x3 depthwise conv with stride 2."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.pw = conv(cin, cout, 1)
        self.pw_act = nn.ReLU()
        self.dw = conv(cout, cout, 3, stride=2, groups=cout)
        self.dw_act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dw_act(self.dw(self.pw_act(self.pw(x))))


class RepLKNet(nn.Module):
    def __init__(
        self,
        channels=CHANNELS,
        depths=DEPTHS,
        kernels=KERNELS,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        c0 = channels[0]
        self.stem = nn.Sequential(
            conv(3, c0, 3, stride=2),
            nn.ReLU(),
            conv(c0, c0, 3, groups=c0),
            nn.ReLU(),
            conv(c0, c0, 1),
            nn.ReLU(),
            conv(c0, c0, 3, stride=2, groups=c0),
            nn.ReLU(),
        )
        self.stages = nn.ModuleList()
        self.transitions = nn.ModuleList()
        for i, (width, depth, kernel) in enumerate(zip(channels, depths, kernels)):
            blocks = []
            for _ in range(depth):
                blocks += [RepLKBlock(width, kernel), ConvFFN(width)]
            self.stages.append(nn.Sequential(*blocks))
            if i + 1 < len(channels):
                self.transitions.append(Transition(width, channels[i + 1]))
        self.norm = nn.BatchNorm2d(channels[-1])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i < len(self.transitions):
                x = self.transitions[i](x)
        x = self.avgpool(self.norm(x))
        return self.head(torch.flatten(x, 1))


def replknet31b(num_classes: int = 1000) -> RepLKNet:
    return RepLKNet(num_classes=num_classes)
