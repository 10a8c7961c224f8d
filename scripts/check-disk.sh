#!/usr/bin/env bash
# Stop `make test` at once, in one line, when the disk cannot hold what the suite writes: loading
# the node images exports each (~6 GB) through Docker's data root, and the venv, the images and
# pytest's temporary folders need room too. Without this check a full disk shows as a score of
# set-up errors twenty minutes in ("no space left on device" inside `docker save`).
#
#   bash scripts/check-disk.sh            # needs DISK_MIN_GIB (default 12) free where it matters
set -euo pipefail

need_gib="${DISK_MIN_GIB:-12}"
docker_root=/var/lib/docker
[ -d "$docker_root" ] || docker_root=/
for dir in . "${TMPDIR:-/tmp}" "$docker_root"; do
  free_kib=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
  free_gib=$((free_kib / 1024 / 1024))
  if [ "$free_gib" -lt "$need_gib" ]; then
    where=$(df -P "$dir" | awk 'NR == 2 {print $6}')
    echo "check-disk: ${free_gib} GiB free on ${where} (holding ${dir}); the suite needs ${need_gib} GiB: free some (old clones, docker image prune -a) or set DISK_MIN_GIB" >&2
    exit 1
  fi
done
