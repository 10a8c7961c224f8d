"""TorchFix's findings through ddpctl: its own checks, run on the statements ddpctl marks.

The pre-filter must not lose a finding: for one snippet per TorchFix code, and for real files, the
findings on the excerpt equal TorchFix's on the whole file, at the same lines and columns. The
codes the pre-filter covers are TorchFix's default selection (a new TorchFix code fails here).
Without TorchFix, ddpctl's stand-in still reports TOR102; TorchFix is imported only when a file has
a marked statement, and its verdicts are cached."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddpctl.lint import api, torchfix
from ddpctl.lint.index import Index
from tests.support import REPO, skip_unless

FIXTURES = Path(__file__).parent / "fixtures"

# One snippet per default TorchFix code (TOR003 needs the qualified name of checkpoint).
SNIPPETS = {
    "TOR001": "import torch\nx = torch.solve(a, b)\n",
    "TOR002": "import torch\nt = torch.ones(2)\nt.require_grad = True\n",
    "TOR003": "from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x)\n",
    "TOR004": "from torch import solve\n",
    "TOR101": "import torch\nfor i in torch.range(0, 3):\n    pass\n",
    "TOR102": "import torch as th\ndef f(p):\n    return th.load(p, map_location='cpu')\n",
    "TOR103": "from torch import norm\n",
    "TOR104": "import torch\ny = torch.utils.data._utils.collate.default_collate(batch)\n",
    "TOR105": "from torch.utils.data._utils.collate import default_convert\n",
    "TOR106": "import torch\ny = torch.log(1 + x)\n",
    "TOR107": "import torch\nclass A:\n    def f(self, x):\n        return torch.exp(x) - 1\n",
    "TOR201": "import torchvision\nm = torchvision.models.resnet18(pretrained=True)\n",
    "TOR202": "from torchvision.transforms import v2\nt = v2.ToTensor()\n",
    "TOR203": "import torchvision.models as models\n",
}


def _installed() -> None:
    skip_unless(torchfix.location() is not None, "TorchFix is not installed (pip install -e '.[test]')")


def _through_ddpctl(path: Path) -> list[tuple[int, int, str]]:
    src = api.read([path], path.parent)[0]
    return sorted((f.line, f.col, f.rule) for f in torchfix.run(src, Index(src.tree)))


def _whole_file(path: Path) -> list[tuple[int, int, str]]:
    return sorted((v.line, v.column + 1, v.code) for v in torchfix._visit(path.read_text()))


def test_the_pre_filter_covers_torchfixs_default_codes() -> None:
    _installed()
    from torchfix.torchfix import DISABLED_BY_DEFAULT, GET_ALL_ERROR_CODES

    default = {c for c in GET_ALL_ERROR_CODES() if not c.startswith(tuple(DISABLED_BY_DEFAULT))}
    assert default == set(torchfix.GATED_CODES) == set(SNIPPETS)


@pytest.mark.parametrize("code", sorted(SNIPPETS))
def test_each_code_is_found_as_torchfix_finds_it_on_the_whole_file(tmp_path: Path, code: str) -> None:
    _installed()
    path = tmp_path / "snippet.py"
    path.write_text("# a line first, so that lines are mapped back\n" + SNIPPETS[code])
    ours = _through_ddpctl(path)
    assert code in {c for _, _, c in ours}
    assert ours == _whole_file(path)


@pytest.mark.parametrize(
    "path",
    [REPO / "trainer" / "ddpctl_trainer" / "data.py", FIXTURES / "article_style.py", FIXTURES / "tor102_bad.py"],
    ids=str,
)
def test_real_files_find_what_torchfix_finds_on_the_whole_file(path: Path) -> None:
    _installed()
    assert _through_ddpctl(path) == _whole_file(path)


def test_without_torchfix_ddpctl_reports_tor102_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchfix, "location", lambda: None)
    monkeypatch.setattr(torchfix, "version", lambda: None)
    result = api.lint_paths([FIXTURES / "tor102_bad.py"], FIXTURES)
    assert [(f.line, f.rule, f.source) for f in result.findings] == [(4, "TOR102", "ddpctl")]
    assert any("TorchFix is not installed" in n for n in result.notes)
    assert api.lint_paths([FIXTURES / "tor102_clean.py"], FIXTURES).findings == []


def test_torchfix_is_not_imported_for_a_file_it_has_nothing_to_say_about() -> None:
    _installed()
    code = (
        "import sys\nfrom pathlib import Path\nfrom ddpctl.lint import lint_paths\n"
        f"r = lint_paths([Path({str(FIXTURES / 'tutorial_style.py')!r})], Path('.'))\n"
        "assert r.findings == [], r.findings\n"
        "print(sorted(m for m in ('torchfix', 'libcst', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_a_second_run_uses_the_cached_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed()
    first = api.lint_paths([FIXTURES / "article_style.py"], FIXTURES).findings

    def no_torchfix(text: str) -> list[torchfix.Violation]:
        raise AssertionError("TorchFix ran again")

    monkeypatch.setattr(torchfix, "_visit", no_torchfix)
    assert api.lint_paths([FIXTURES / "article_style.py"], FIXTURES).findings == first
