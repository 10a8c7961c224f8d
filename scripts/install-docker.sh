#!/usr/bin/env bash
# Install (if missing) and start (if not answering) a Docker engine, then wait until it works.
#
# Idempotent: safe to run on every CI run and on a developer machine. Needs root for the install
# and to start dockerd. Used by .ci/run before pytest so the Docker tests run instead of failing.
#
#   bash scripts/install-docker.sh          # install + start + wait
#   DOCKER_WAIT_S=120 bash scripts/install-docker.sh
set -euo pipefail

WAIT_S="${DOCKER_WAIT_S:-90}"
LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"

log() { printf 'install-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  log "docker engine already answers"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    log "dockerd is missing and this is not root: install docker (e.g. apt-get install docker.io) first"
    exit 1
  fi
  log "installing docker.io (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # docker.io brings dockerd, containerd, runc and the CLI; iptables for the bridge network.
  apt-get install -y -qq --no-install-recommends docker.io iptables >/dev/null
fi

if ! command -v docker >/dev/null 2>&1; then
  log "no docker CLI after install"
  exit 1
fi

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    log "the docker engine is not running and this is not root: start it (sudo systemctl start docker)"
    exit 1
  fi
  # Some hosts have nftables-only kernels: prefer the legacy iptables backend when it exists.
  if command -v update-alternatives >/dev/null 2>&1 && [ -x /usr/sbin/iptables-legacy ]; then
    if ! iptables -L >/dev/null 2>&1; then
      update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null 2>&1 || true
      update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null 2>&1 || true
    fi
  fi
  if [ -S /var/run/docker.sock ] && ! pgrep -x dockerd >/dev/null 2>&1; then
    rm -f /var/run/docker.sock /var/run/docker.pid   # a stale socket from a dead engine
  fi
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    log "starting dockerd (log: $LOG)"
    mkdir -p "$(dirname "$LOG")"
    # setsid + nohup: the engine must outlive this script and the CI step that ran it.
    setsid nohup dockerd >"$LOG" 2>&1 </dev/null &
  fi
  deadline=$(( $(date +%s) + WAIT_S ))
  until docker info >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "dockerd did not answer within ${WAIT_S}s; last lines of $LOG:"
      tail -n 20 "$LOG" >&2 || true
      exit 1
    fi
    sleep 1
  done
fi
log "docker engine ready: $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown)"
