"""One real node next to the kwok nodes: a kubelet whose pods really run, for the gloo tests.

    kubelet (the control plane's build) -> containerd v2 (go/containerd) -> Debian's runc
    pod network: Debian's CNI bridge + host-local plugins on a bridge of our own (ddpctl0)
    cluster DNS: CoreDNS on the bridge address, so `<pod>.<service>` names resolve in pods
    the pod sandbox: a pause program built here (go/pause), imported as an image (no registry)

It needs root (a bridge, an iptables rule, mounts, cgroups). Everything it makes lives under
.cluster/node, except what the kernel keeps elsewhere (the bridge, one FORWARD rule, the pods'
cgroups under <hierarchy>/ddpctl-node), and `down` removes all of it. Pods land here only when
they ask for it: the node carries the label and NoSchedule taint `node.ddpctl.io/real=true`.

Modules, top to bottom: lifecycle (up, down) > kubelet (and CoreDNS) | containerd (and images)
> host (bridge, iptables, cgroups, mounts) > layout (names, addresses, paths). This folder also
holds the node's build (build.sh, go/: its cache key hashes those, not the Python here).
"""
