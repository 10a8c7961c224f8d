"""The test cluster: a real Kubernetes control plane and the four engines' controllers on loopback.

Every component is a host process built from the Go modules in go/ (scripts/build.sh): etcd,
kube-apiserver, kube-controller-manager, kube-scheduler (control_plane), kwok's simulated GPU nodes
whose pods run, finish or fail by Stages (kwok), and the JobSet, Kueue, Kubeflow Trainer v2 and
training-operator v1 managers (controllers). Next to the kwok nodes runs one real node (node/:
kubelet, containerd, runc, a CNI bridge, CoreDNS) whose pods really run; it needs root and is
skipped without it. Webhooks are served by the managers themselves on 127.0.0.1 with a CA made here
(pki); every webhook configuration and conversion webhook points at its `url` (manifests). State
lives in .cluster/ (or $DDPCTL_CLUSTER_DIR); ports start at $DDPCTL_CLUSTER_PORT_BASE (settings).

The commands: `python -m testcluster up|down|status|nodes N|load REF...` (cli), from the clone's root.
Not part of ddpctl: neither imports the other.
"""
