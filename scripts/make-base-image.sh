#!/usr/bin/env bash
# Make a CPU base image for the trainer WITHOUT pulling anything from a container registry:
# a Debian bookworm minbase rootfs (debootstrap) with python3, pip, torch and torchvision at the
# versions pinned in scripts/torch-version.env (the same as `make run`'s venv), imported into the
# local engine as ddpctl-base:cpu.
#
#   bash scripts/make-base-image.sh                 # skip when the image already exists
#   FORCE=1 bash scripts/make-base-image.sh         # rebuild
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/make-base-image.sh   # (the default)
#   TORCH_WHEEL=/path/torch-2.14.1+cpu-cp311-...whl TORCHVISION_WHEEL=/path/torchvision-...whl bash scripts/make-base-image.sh
#
# Wheels come from TORCH_WHEEL/TORCHVISION_WHEEL when given, else through the host's pip from PyPI
# plus TORCH_INDEX_URL (default: PyTorch's CPU index, whose +cpu builds pip prefers). Where that
# index cannot be reached, pip falls back to PyPI's default build of the same version: on Linux
# the CUDA one, gigabytes larger but the same torch (the script says so).
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

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=torch-version.env
. "$HERE/torch-version.env"
PINS="torch $TORCH_VERSION, torchvision $TORCHVISION_VERSION"
# How the rootfs is made; a change that alters the image's contents bumps it, so an image made by
# the older recipe is rebuilt. 2: the installed modules keep their bytecode.
RECIPE=2
if [ -z "${FORCE:-}" ] && "$ENGINE" image inspect "$TAG" >/dev/null 2>&1; then
  HAS="$("$ENGINE" image inspect --format '{{index .Config.Labels "io.ddpctl.torch"}}' "$TAG" 2>/dev/null || true)"
  MADE="$("$ENGINE" image inspect --format '{{index .Config.Labels "io.ddpctl.base-recipe"}}' "$TAG" 2>/dev/null || true)"
  if [ "$HAS" = "$PINS" ] && [ "$MADE" = "$RECIPE" ]; then
    log "$TAG already exists with $PINS (FORCE=1 to rebuild)"
    exit 0
  fi
  if [ "$HAS" = "$PINS" ]; then
    log "$TAG was made by an older recipe (${MADE:-1}, now $RECIPE): rebuilding"
  else
    log "$TAG has ${HAS:-another torch}, the pins say $PINS: rebuilding"
  fi
fi
if [ "$(id -u)" != 0 ]; then
  log "needs root (debootstrap and chroot)"
  exit 1
fi

TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
TORCH_REQS=("${TORCH_WHEEL:-torch==$TORCH_VERSION}" "${TORCHVISION_WHEEL:-torchvision==$TORCHVISION_VERSION}")
for w in "${TORCH_WHEEL:-}" "${TORCHVISION_WHEEL:-}"; do
  if [ -n "$w" ] && [ ! -f "$w" ]; then
    log "no such wheel: $w"
    exit 1
  fi
done
case "$(basename "${TORCH_WHEEL:-torch-$TORCH_VERSION-}")" in
  "torch-$TORCH_VERSION-"* | "torch-$TORCH_VERSION+"*) ;;
  *) log "TORCH_WHEEL is not torch $TORCH_VERSION (scripts/torch-version.env pins it): $TORCH_WHEEL"; exit 1 ;;
esac

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

WHEELS="$WORK/wheels"
step_start "fetching torch $TORCH_VERSION, torchvision $TORCHVISION_VERSION and their dependencies with the host's pip"
mkdir -p "$WHEELS"
command -v python3 >/dev/null 2>&1 || { log "the host needs python3 with pip to fetch wheels"; exit 1; }
INDEX_ARGS=()
[ -z "$TORCH_INDEX_URL" ] || INDEX_ARGS=(--extra-index-url "$TORCH_INDEX_URL")
# Wheels for the rootfs's Python 3.11 and glibc 2.36 (bookworm), whatever the host runs: every manylinux
# tag up to glibc 2.28 by name, as pip does not widen --platform on its own.
PLATFORMS=(--platform any --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for glibc in $(seq 28 -1 5); do PLATFORMS+=(--platform "manylinux_2_${glibc}_x86_64"); done
python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.11 --implementation cp \
  "${PLATFORMS[@]}" --retries 1 --timeout 30 "${INDEX_ARGS[@]}" --dest "$WHEELS" "${TORCH_REQS[@]}" $EXTRA_PIP
TORCH_FILE="$(basename "$(ls "$WHEELS"/torch-"$TORCH_VERSION"*.whl | head -n 1)")"
case "$TORCH_FILE" in
  *+cpu-*) ;;
  *) log "warning: $TORCH_FILE is not a CPU build (no CPU wheel given and $TORCH_INDEX_URL not reachable): a bigger image, the same torch" ;;
esac
step_end

step_start "debootstrap --variant=minbase $SUITE from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates "$SUITE" "$ROOTFS" "$MIRROR" \
  >"$WORK/debootstrap.log" 2>&1 || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }
step_end

step_start "installing torch into the rootfs (offline pip in chroot)"
mv "$WHEELS" "$ROOTFS/tmp/wheels"
mount -t proc proc "$ROOTFS/proc"
CHROOT_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
"${CHROOT_ENV[@]}" chroot "$ROOTFS" /usr/bin/python3 -m pip install --quiet --no-index --find-links /tmp/wheels \
  --break-system-packages --no-cache-dir --root-user-action=ignore \
  "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" $EXTRA_PIP
umount "$ROOTFS/proc"
"${CHROOT_ENV[@]}" chroot "$ROOTFS" /usr/bin/python3 -c "import torch, torchvision, torch.distributed as d; assert d.is_gloo_available(); print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
step_end

step_start "trimming the rootfs"
rm -rf "$ROOTFS/tmp/wheels" "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* "$ROOTFS/root/.cache"
# The bytecode pip wrote stays: a container's root is read-only (and PYTHONDONTWRITEBYTECODE is
# set), so a module without it is compiled again at every start; without it each `import torch`
# in a container cost ~1.7 s more CPU than in the venv.
ln -sf python3 "$ROOTFS/usr/bin/python"
step_end

step_start "importing as $TAG"
tar -C "$ROOTFS" --numeric-owner -c . | "$ENGINE" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  --change "LABEL io.ddpctl.torch=\"$PINS\"" \
  --change "LABEL io.ddpctl.base-recipe=$RECIPE" \
  - "$TAG" >/dev/null
step_end
log "built $TAG in $(( $(date +%s) - T_ALL ))s ($("$ENGINE" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
