"""Kueue's API names that ddpctl writes or reads, in one place (stdlib only, so every layer may
import it). Labels go on the top-level object, topology annotations on each PodSet's pod template;
the values are Kueue's own (sigs.k8s.io/kueue apis/kueue/v1beta2, checked against v0.19)."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on the Workload Kueue makes for an object

# Topology Aware Scheduling, per PodSet: at most one of the first three
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
# two PodSets placed as one (one of them with a single pod), e.g. a PyTorchJob's Master and Worker;
# only with a required or preferred level and no slice
PODSET_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
