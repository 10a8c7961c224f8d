#!/usr/bin/env bash
# Make a CPU base image for the trainer WITHOUT pulling anything from a container registry:
# a Debian bookworm minbase rootfs (debootstrap) with python3, pip and the CPU torch wheel,
# imported into the local engine as ddpctl-base:cpu.
#
#   bash scripts/make-base-image.sh                 # skip when the image already exists
#   FORCE=1 bash scripts/make-base-image.sh         # rebuild
#   BASE_TAG=ddpctl-base:cpu TORCH_WHEEL=/path/torch-...+cpu-cp311-...whl bash scripts/make-base-image.sh
#
# Then: ddpctl build --base-image ddpctl-base:cpu
# Needs root (debootstrap, chroot) and a running engine (scripts/install-docker.sh).
set -euo pipefail

TAG="${BASE_TAG:-ddpctl-base:cpu}"
SUITE="${SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-}"
ENGINE="${ENGINE:-docker}"
EXTRA_PIP="${EXTRA_PIP:-numpy tqdm}"   # extras the trainer uses when present (numpy: no torch warning)
log() { printf 'make-base-image: %s\n' "$*" >&2; }
step_start() { STEP_T0=$(date +%s); log "$1"; }
step_end() { log "  done in $(( $(date +%s) - STEP_T0 ))s"; }

if [ -z "${FORCE:-}" ] && "$ENGINE" image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG already exists (FORCE=1 to rebuild)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "needs root (debootstrap and chroot)"
  exit 1
fi

# The CPU torch wheel for the rootfs's Python (bookworm: 3.11). PyPI's default Linux torch wheel
# is the CUDA build (gigabytes), so a CPU wheel must be given or lie in /opt/wheels.
WHEEL="${TORCH_WHEEL:-}"
if [ -z "$WHEEL" ]; then
  WHEEL="$(ls /opt/wheels/torch-*+cpu-cp311-cp311-*x86_64.whl 2>/dev/null | sort -V | tail -n 1 || true)"
fi
if [ -z "$WHEEL" ] || [ ! -f "$WHEEL" ]; then
  log "no CPU torch wheel for cp311: set TORCH_WHEEL=/path/to/torch-X+cpu-cp311-cp311-manylinux...x86_64.whl"
  exit 1
fi

T_ALL=$(date +%s)
if ! command -v debootstrap >/dev/null 2>&1; then
  step_start "installing debootstrap (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  step_end
fi
if [ -z "$MIRROR" ]; then
  # The host's own Debian mirror (deb822 or one-line sources), else the default.
  MIRROR="$(grep -hoE '^URIs: *http[^ ]+/debian$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | sed 's/^URIs: *//' || true)"
  [ -n "$MIRROR" ] || MIRROR="$(grep -hoE '^deb +http[^ ]+/debian ' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}' || true)"
  [ -n "$MIRROR" ] || MIRROR="http://deb.debian.org/debian"
fi

WORK="$(mktemp -d /var/tmp/ddpctl-base.XXXXXX)"
ROOTFS="$WORK/rootfs"
cleanup() {
  for m in proc dev/pts dev sys; do umount -l "$ROOTFS/$m" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

step_start "debootstrap --variant=minbase $SUITE from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates "$SUITE" "$ROOTFS" "$MIRROR" \
  >"$WORK/debootstrap.log" 2>&1 || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }
step_end

step_start "fetching torch's dependencies with the host's pip"
mkdir -p "$ROOTFS/tmp/wheels"
cp "$WHEEL" "$ROOTFS/tmp/wheels/"
PIP=(python3 -m pip)
command -v python3 >/dev/null 2>&1 || { log "the host needs python3 with pip to fetch wheels"; exit 1; }
"${PIP[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
  --dest "$ROOTFS/tmp/wheels" "$ROOTFS/tmp/wheels/$(basename "$WHEEL")" $EXTRA_PIP
step_end

step_start "installing torch into the rootfs (offline pip in chroot)"
mount -t proc proc "$ROOTFS/proc"
CHROOT_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
"${CHROOT_ENV[@]}" chroot "$ROOTFS" /usr/bin/python3 -m pip install --quiet --no-index --find-links /tmp/wheels \
  --break-system-packages --no-cache-dir --root-user-action=ignore "/tmp/wheels/$(basename "$WHEEL")" $EXTRA_PIP
umount "$ROOTFS/proc"
"${CHROOT_ENV[@]}" chroot "$ROOTFS" /usr/bin/python3 -c "import torch, torch.distributed as d; assert d.is_gloo_available(); print('torch', torch.__version__)"
step_end

step_start "trimming the rootfs"
rm -rf "$ROOTFS/tmp/wheels" "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* "$ROOTFS/root/.cache"
find "$ROOTFS/usr/local/lib" -name '__pycache__' -type d -prune -exec rm -rf {} + 2>/dev/null || true
ln -sf python3 "$ROOTFS/usr/bin/python"
step_end

step_start "importing as $TAG"
tar -C "$ROOTFS" --numeric-owner -c . | "$ENGINE" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$TAG" >/dev/null
step_end
log "built $TAG in $(( $(date +%s) - T_ALL ))s ($("$ENGINE" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
