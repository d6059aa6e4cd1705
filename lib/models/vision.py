"""VGG19 and ResNet50 as torchvision defines them (written here: there is no CPU torchvision wheel).

Both end in an adaptive average pool, so a smaller input runs the same parameters: at 32x32 VGG19
still has its 143.7 M parameters (the 25088x4096 layer included) and synchronizes the same 548 MiB
of gradients per iteration; only the convolutions do less work.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .registry import BadModelOption, Batch, ModelSpec, register

_VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


class VGG(nn.Module):
    """VGG without batch norm (Simonyan & Zisserman 2015), the variant HiPress trained (38 tensors)."""

    def __init__(self, cfg: list[int | str] = _VGG19, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(c_in, int(v), kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                c_in = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""

    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int = 1) -> None:
        super().__init__()
        c_out = width * self.expansion
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet (He et al. 2016) with bottleneck blocks; ``layers=(3, 4, 6, 3)`` is ResNet50."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        c_in = 64
        stages = []
        for i, n in enumerate(layers):
            width = 64 * 2**i
            blocks = []
            for j in range(n):
                blocks.append(Bottleneck(c_in, width, stride=2 if (i > 0 and j == 0) else 1))
                c_in = width * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def image_batch(batch_size: int, opts: dict[str, int], device: torch.device, gen: torch.Generator | None) -> Batch:
    """Random images and ImageNet labels (1000 classes)."""
    s = opts["input_size"]
    x = torch.randn(batch_size, 3, s, s, device=device, generator=gen)
    y = torch.randint(0, 1000, (batch_size,), device=device, generator=gen)
    return x, y


def classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _min_input(name: str, smallest: int):
    def check(opts: dict[str, int]) -> None:
        if opts["input_size"] < smallest:
            raise BadModelOption(
                f"model {name!r}: input_size {opts['input_size']} is too small; it needs at least {smallest} "
                f"pixels (five 2x poolings)"
            )

    return check


register(ModelSpec(
    name="vgg19",
    summary="VGG19 (no batch norm), ImageNet: 143.7 M parameters, 38 gradients",
    unit="images",
    paper={"input_size": 224, "batch_size": 32},
    cpu={"input_size": 32, "batch_size": 4},
    factory=lambda: VGG(),
    make_batch=image_batch,
    loss=classification_loss,
    check=_min_input("vgg19", 32),
    notes="parameters do not depend on input_size (adaptive 7x7 pooling before the classifier)",
))

def _check_resnet(opts: dict[str, int]) -> None:
    _min_input("resnet50", 32)(opts)
    if opts["batch_size"] * (opts["input_size"] // 32) ** 2 < 2:
        raise BadModelOption(
            f"model 'resnet50': batch_size {opts['batch_size']} at input_size {opts['input_size']} leaves one value "
            f"per channel for the last batch norm; use batch_size >= 2 or input_size >= 64"
        )


register(ModelSpec(
    name="resnet50",
    summary="ResNet50 v1.5, ImageNet: 25.6 M parameters, 161 gradients",
    unit="images",
    paper={"input_size": 224, "batch_size": 32},
    cpu={"input_size": 64, "batch_size": 4},
    factory=lambda: ResNet(),
    make_batch=image_batch,
    loss=classification_loss,
    check=_check_resnet,
    notes="parameters do not depend on input_size (global average pooling)",
))
