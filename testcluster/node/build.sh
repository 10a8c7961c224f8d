#!/usr/bin/env bash
# Builds the real node's binaries (containerd, its runc shim, ctr, CoreDNS, the pause program) from
# the Go modules under cluster/node/go into a cache outside the clone, keyed by those modules and this
# script. Their versions are the go.mod pins. The kubelet comes from the control plane's build
# (cluster/scripts/build.sh), so it is the same k8s.io/kubernetes. Prints the bin folder last.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key=$( (cd "$here" && cat build.sh && find go -type f | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-16)
cache=${DDPCTL_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddpctl/cluster}
bin=$cache/node-$key/bin
if [ -f "$cache/node-$key/.complete" ]; then
  echo "real node binaries: cached ($bin)" >&2
  echo "$bin"; exit 0
fi
command -v go >/dev/null || { echo "the real node needs Go (go build of cluster/node/go): not found" >&2; exit 1; }
mkdir -p "$bin.partial"
jobs=$(nproc)
timed() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "built $name in $((SECONDS - t0)) s" >&2; }
build() {  # module-dir, extra go build flags..., packages...
  local dir=$1; shift
  (cd "$here/go/$dir" && CGO_ENABLED=0 go build -p "$jobs" -trimpath -o "$bin.partial/" "$@")
}
ctrd=$(cd "$here/go/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
# No cgo, so the snapshotters that need it (btrfs, devmapper, zfs) are left out: overlayfs is used.
timed containerd build containerd -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$ctrd" \
  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
timed coredns build coredns -ldflags "-s -w" .
timed pause build pause -ldflags "-s -w" .
rm -rf "$bin"; mv "$bin.partial" "$bin"; touch "$cache/node-$key/.complete"
echo "$bin"
