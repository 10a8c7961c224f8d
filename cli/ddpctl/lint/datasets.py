"""Where each torchvision dataset takes `download`: by keyword always, and at this position when
given positionally (the datasets differ: `MNIST(root, train, transform, target_transform,
download)`, `STL10(root, split, folds, transform, target_transform, download)`, ...). A dataset not
in the table is read by keyword only."""

from __future__ import annotations

import ast

from ddpctl.lint.index import Index, arg

# torchvision.datasets: the 0-based position of `download` (root is 0)
DOWNLOAD_POSITION: dict[str, int] = {
    "MNIST": 4,
    "FashionMNIST": 4,
    "KMNIST": 4,
    "CIFAR10": 4,
    "CIFAR100": 4,
    "SVHN": 4,
    "USPS": 4,
    "Omniglot": 4,
    "Caltech101": 4,
    "Caltech256": 4,
    "Flowers102": 4,
    "Food101": 4,
    "StanfordCars": 4,
    "GTSRB": 4,
    "PCAM": 4,
    "Country211": 4,
    "CLEVRClassification": 4,
    "STL10": 5,
    "CelebA": 5,
    "FGVCAircraft": 5,
    "DTD": 5,
    "OxfordIIITPet": 6,
    "VOCSegmentation": 3,
    "VOCDetection": 3,
    "Places365": 3,
    "SBU": 3,
    "SEMEION": 3,
    "EuroSAT": 3,
}


def download_argument(idx: Index, call: ast.Call) -> ast.expr | None:
    """The `download` argument of `call`: its keyword, or its position for a torchvision dataset."""
    name = idx.callee(call)
    last = name.rsplit(".", 1)[-1]
    position = DOWNLOAD_POSITION.get(last) if name.startswith("torchvision.") else None
    return arg(call, "download", position)
