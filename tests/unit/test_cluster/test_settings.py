"""testcluster.settings: versions.env as make and bash read it, and the ports the cluster binds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testcluster.settings import V, parse_env, ports
from tests.support import REPO


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("A=1\nB=v2\n", {"A": "1", "B": "v2"}),
        ("# a comment\n\nA=1\n", {"A": "1"}),
        ("A = 1 \n", {"A": "1"}),
        ("A=b=c\n", {"A": "b=c"}),  # the first `=` splits
        ("not a pair\n#B=2\n", {}),
    ],
)
def test_versions_env_is_read_as_key_value_lines(text: str, parsed: dict[str, str]) -> None:
    assert parse_env(text) == parsed


def test_versions_env_pins_every_version_the_cluster_reads() -> None:
    wanted = {"KUBERNETES_VERSION", "KWOK_VERSION", "JOBSET_VERSION", "KUEUE_VERSION", "TRAINER_VERSION",
              "TRAINING_OPERATOR_VERSION"}  # fmt: skip
    assert wanted <= set(V)
    assert all(V[k].startswith("v") for k in wanted), V


@pytest.mark.parametrize("base", [36400, 1024, 60000])
def test_every_port_is_distinct_and_above_the_base(base: int) -> None:
    got = ports(base)
    assert len(set(got.values())) == len(got), got
    assert min(got.values()) == base
    assert max(got.values()) < base + 100


@pytest.mark.parametrize("manager", ["jobset", "kueue", "trainer", "training-operator"])
def test_each_manager_probes_health_on_the_port_after_its_webhooks(manager: str) -> None:
    got = ports(2000)
    assert got[f"{manager}-health"] == got[manager] + 1


def test_the_environment_moves_the_state_folder_and_the_ports(tmp_path: Path) -> None:
    code = "from testcluster import settings; print(settings.STATE); print(settings.PORTS['apiserver'])"
    env = {**os.environ, "DDPCTL_CLUSTER_DIR": str(tmp_path), "DDPCTL_CLUSTER_PORT_BASE": "41000"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(tmp_path), "41002"]


def test_the_default_ports_lie_below_the_kernels_ephemeral_range() -> None:
    """An outbound connection's local port comes from the ephemeral range: a cluster port inside it
    can be held by any passing connection when `up` binds it (seen: kube-scheduler's, under load)."""
    code = "from testcluster import settings; print(max(settings.PORTS.values()))"
    env = {k: v for k, v in os.environ.items() if k != "DDPCTL_CLUSTER_PORT_BASE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    first = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    assert int(out.stdout) < first
