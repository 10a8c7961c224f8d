"""The components as host processes: start one in its own session with a pidfile and a log, stop
it with its children, and wait for it to answer (or fail with the end of its log)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from testcluster.settings import STATE


def log(msg: str) -> None:
    print(f"cluster: {msg}", file=sys.stderr, flush=True)


def fail(msg: str) -> NoReturn:
    log(f"error: {msg}")
    raise SystemExit(1)


def pidfile(name: str) -> Path:
    return STATE / "run" / f"{name}.pid"


def running(name: str) -> int | None:
    """The pid of the component when its process is alive, else None. A zombie is not alive: the
    components outlive `cluster up`, so init reaps them, and an init that reaps every second or two
    (as this sandbox's does) made each stop wait that long."""
    try:
        pid = int(pidfile(name).read_text())
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return None if state == "Z" else pid


def start(name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    """Start a component in its own session (so `down` stops it and its children), log to a file."""
    if running(name):
        return
    (STATE / "run").mkdir(parents=True, exist_ok=True)
    (STATE / "logs").mkdir(parents=True, exist_ok=True)
    with open(STATE / "logs" / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=cwd or STATE,
        )
    pidfile(name).write_text(str(proc.pid))


def stop(name: str, timeout: float = 15) -> None:
    """SIGTERM the component's process group, SIGKILL it after `timeout`, forget its pid."""
    pid = running(name)
    if pid:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except OSError:
                break
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and running(name):
                time.sleep(0.1)
            if not running(name):
                break
    pidfile(name).unlink(missing_ok=True)


def wait_for(what: str, check: Callable[[], bool], timeout: float, name: str | None = None) -> None:
    """Poll `check` until it holds; fail on timeout, or at once with its log when `name` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name and not running(name):
            tail = (STATE / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
            fail(f"{name} exited while waiting for {what}:\n  " + "\n  ".join(tail))
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError, subprocess.CalledProcessError):
            pass
        time.sleep(0.2)
    fail(f"timed out after {timeout:.0f} s waiting for {what} (logs: {STATE / 'logs'})")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def https_answers(
    port: int, path: str = "/", want: tuple[int, ...] = (200,), verify: bool = True, ca: str = "ca"
) -> bool:
    """A TLS server on the port that trusts our CA answers `path` (any HTTP status in `want`)."""
    ctx = ssl.create_default_context(cafile=str(STATE / f"pki/{ca}.crt"))
    if not verify:  # the controller manager and scheduler serve a certificate they made themselves
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(STATE / "pki/admin.crt"), str(STATE / "pki/admin.key"))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=2) as r:
            return int(r.status) in want
    except urllib.error.HTTPError as e:
        return e.code in want
