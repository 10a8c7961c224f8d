"""ddpctl_trainer.models: the built-in models, and a user's ``module:factory`` checked alike before
the process group and when the model is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.models import ConvNet, build_model, check_model_spec


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:build", r"cannot import 'no_such_module_xyz'"),
        ("umod_for_test:missing", r"umod_for_test has no callable 'missing'"),
        ("umod_for_test:NOT_CALLABLE", r"umod_for_test has no callable 'NOT_CALLABLE'"),
        (":build", r"written module:factory"),
        ("umod_for_test:", r"written module:factory"),
    ],
)
def test_custom_model_spec_errors_are_the_same_early_and_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, message: str
) -> None:
    """``check_model_spec`` (before the process group) and ``build_model`` share one check."""

    (tmp_path / "umod_for_test.py").write_text(
        "import torch.nn as nn\nNOT_CALLABLE = 3\ndef build():\n    return nn.Linear(2, 2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match=message) as early:
        check_model_spec(spec)
    with pytest.raises(UsageError, match=message) as late:
        build_model(spec, 4)
    assert str(early.value) == str(late.value)


def test_custom_model_factory_without_num_classes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    (tmp_path / "umod_for_test2.py").write_text(
        "import torch.nn as nn\ndef build():\n    return nn.Linear(2, 2)\n"
        "def bad(num_classes):\n    return 'not a module'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    check_model_spec("umod_for_test2:build")
    assert isinstance(build_model("umod_for_test2:build", 4), torch.nn.Linear)
    with pytest.raises(UsageError, match=r"the factory returned str, not a torch nn\.Module"):
        build_model("umod_for_test2:bad", 4)


@pytest.mark.parametrize(("size", "classes"), [(8, 4), (32, 10), (45, 2)])
def test_the_convnet_classifies_any_image_size(size: int, classes: int) -> None:
    model = build_model("convnet", classes)
    assert isinstance(model, ConvNet)
    assert model(torch.zeros(3, 3, size, size)).shape == (3, classes)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())  # see models.py


@pytest.mark.parametrize("spec", ["vgg11", "resnet"])
def test_an_unknown_model_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError, match=f"unknown --model '{spec}'"):
        build_model(spec, 4)
