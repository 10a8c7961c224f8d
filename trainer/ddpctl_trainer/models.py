"""Models: the article's small conv net (grown into a classifier), torchvision ResNets, or yours.

``convnet`` has no BatchNorm on purpose: BatchNorm statistics are per process, so a model with
it does not train identically on 1 and N processes, and the equivalence tests need that it does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from .errors import UsageError
from .plugins import import_named


class ConvNet(nn.Module):
    """Two conv blocks and two linear layers; works for any image size (adaptive pooling)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),  # RGB: every dataset here yields 3-channel images
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(inplace=True),
            nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features(x))
        return logits


def _torchvision_model(name: str, num_classes: int) -> nn.Module:
    try:
        import torchvision
    except ImportError:
        raise UsageError(f"--model {name} needs torchvision, which this image lacks: pip install torchvision") from None
    model: nn.Module = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    return model


def _import_factory(spec: str) -> Callable[..., Any]:
    """``module:factory`` -> the callable; the one place that checks a custom model's spec."""
    form = "a custom model is written module:factory, e.g. mypkg.models:build"
    module_name, attr, factory = import_named("--model", spec, form)
    if not callable(factory):
        raise UsageError(f"--model {spec!r}: {module_name} has no callable {attr!r}")
    return factory


def _user_model(spec: str, num_classes: int) -> nn.Module:
    factory = _import_factory(spec)
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    model = factory(num_classes=num_classes) if "num_classes" in params else factory()
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec!r}: the factory returned {type(model).__name__}, not a torch nn.Module")
    return model


def check_model_spec(spec: str) -> None:
    """Fail early (before the process group) on a custom model that cannot be imported."""
    if ":" in spec:
        _import_factory(spec)
    elif spec in ("resnet18", "resnet50"):
        _torchvision_model_available(spec)


def _torchvision_model_available(name: str) -> None:
    try:
        import torchvision  # noqa: F401 - only asks whether it imports
    except ImportError:
        raise UsageError(f"--model {name} needs torchvision, which this image lacks: pip install torchvision") from None


def build_model(spec: str, num_classes: int) -> nn.Module:
    """The model named by ``--model``, on the CPU in float32 (the trainer moves it)."""
    if spec == "convnet":
        return ConvNet(num_classes)
    if spec in ("resnet18", "resnet50"):
        return _torchvision_model(spec, num_classes)
    if ":" in spec:
        return _user_model(spec, num_classes)
    raise UsageError(f"unknown --model {spec!r}: use one of convnet, resnet18, resnet50 or module:factory")
