"""A fake `docker` on PATH for the unit tests of what `submit` and `ddpctl build` read from a
local image: `image inspect`, `create`, `cp CONTAINER:PATH -` (a tar of that path, as the engine
streams it: named from its last part down, by name) and `rm`, answered from folders standing in
for images' file systems. Each call is logged, so a test can tell the cache answered."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = r'''
import json, os, sys, tarfile
state = json.load(open(os.environ["FAKE_ENGINE_STATE"]))
with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    image = state["images"].get(args[-1])
    if image is None:
        sys.stderr.write("Error: No such image: " + args[-1] + "\n")
        sys.exit(1)
    config = {"WorkingDir": image["workdir"], "Labels": image["labels"], "Env": image["env"]}
    print(json.dumps({"Id": image["id"], "Config": config}))
elif args[0] == "create":
    ref = args[3]
    name = next((n for n, i in state["images"].items() if ref in (n, i["id"])), None)
    if name is None:
        sys.exit(1)
    print("container-" + state["images"][name]["id"].split(":")[-1])
elif args[0] == "cp":
    container, _, path = args[1].partition(":")
    image = next(i for i in state["images"].values() if container == "container-" + i["id"].split(":")[-1])
    source = os.path.join(image["root"], path.lstrip("/"))
    if not os.path.lexists(source):
        sys.stderr.write("Error: Could not find the file " + path + " in container " + container + "\n")
        sys.exit(1)
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        tar.add(source, arcname=os.path.basename(path.rstrip("/")))
elif args[0] == "rm":
    pass
else:
    sys.exit(1)
'''


@dataclass
class FakeEngine:
    folder: Path

    @property
    def state(self) -> Path:
        return self.folder / "state.json"

    def add(
        self,
        name: str,
        files: dict[str, str],
        *,
        workdir: str = "/",
        labels: dict[str, str] | None = None,
        env: list[str] | None = None,
    ) -> Path:
        """An image `name` holding `files` (path in the image: content); its root folder returned."""
        data = json.loads(self.state.read_text())
        image_id = f"sha256:{len(data['images']):064x}"
        root = self.folder / "images" / image_id.split(":")[1]
        for path, text in files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        root.mkdir(parents=True, exist_ok=True)
        data["images"][name] = {
            "id": image_id, "root": str(root), "workdir": workdir, "labels": labels or {}, "env": env or [],
        }  # fmt: skip
        self.state.write_text(json.dumps(data))
        return root

    def calls(self, verb: str = "") -> list[str]:
        log = self.folder / "log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if line.startswith(verb)]


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    folder = tmp_path / "fake-engine"
    (folder / "bin").mkdir(parents=True)
    docker = folder / "bin" / "docker"
    docker.write_text(f"#!{sys.executable}\n{SCRIPT}")
    docker.chmod(0o755)
    (folder / "state.json").write_text(json.dumps({"images": {}}))
    monkeypatch.setenv("FAKE_ENGINE_STATE", str(folder / "state.json"))
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(folder / "log"))
    monkeypatch.setenv("PATH", str(folder / "bin"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return FakeEngine(folder)
