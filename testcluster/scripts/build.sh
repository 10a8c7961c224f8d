#!/usr/bin/env bash
# Builds the test cluster's binaries from the Go modules under cluster/go into a cache outside the
# clone, keyed by everything that decides them (versions.env, each module's go.mod/go.sum and
# sources). A warm cache makes this a no-op; an empty one builds everything from the module proxy.
# Prints the bin folder on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../versions.env
source "$here/versions.env"
key=$( (cd "$here" && cat versions.env scripts/build.sh && find go -type f | LC_ALL=C sort | xargs cat) \
  | sha256sum | cut -c1-16)
cache=${DDPCTL_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddpctl/cluster}
bin=$cache/$key/bin
if [ -f "$cache/$key/.complete" ]; then
  echo "cluster binaries: cached ($bin)" >&2
  echo "$bin"; exit 0
fi
command -v go >/dev/null || { echo "make cluster needs Go (go build of cluster/go): not found" >&2; exit 1; }
mkdir -p "$bin.partial"
jobs=$(nproc)
# The version stamps hack/lib/golang.sh sets: tools pick flags from --version, and v0.0.0 breaks them.
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
tags=selinux,notest,grpcnotrace
timed() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "built $name in $((SECONDS - t0)) s" >&2; }
build_module() {  # module-dir, packages...
  local dir=$1; shift
  (cd "$here/go/$dir" && CGO_ENABLED=0 go build -p "$jobs" -trimpath -tags "$tags" \
     -ldflags "-s -w $ldflags" -o "$bin.partial/" "$@")
}
# One go build per binary so each component's time is printed; the shared build cache makes the
# later ones pay only for what they add.
for tool in ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
            k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl sigs.k8s.io/kwok/cmd/kwok \
            sigs.k8s.io/jobset sigs.k8s.io/kueue/cmd/kueue \
            github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager k8s.io/kubernetes/cmd/kubelet; do
  timed "$(basename "$tool")" build_module k8s "$tool"
done
if [ -d "$here/go/training-operator" ]; then
  timed training-operator build_module training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1
fi
rm -rf "$bin"; mv "$bin.partial" "$bin"; touch "$cache/$key/.complete"
echo "$bin"
