{{/*
GENERATED from ddpctl's Python by `make chart-contract` (python tools/chart_contract.py --write); do not edit.
What _helpers.tpl would otherwise restate: the spec's limits and defaults, the messages of the
rules the chart checks at render time, the pods' labels and env, and per engine its names,
wiring, failure rules and what it refuses. `%(arg)` in a text is filled by ddp-job.format.
*/}}
{{- define "ddp-job.generated" -}}
{
  "constants": {
    "maxNodes": 1024,
    "maxDnsLabel": 63,
    "graceMargin": 10,
    "trainerModule": "ddpctl_trainer",
    "stallTimeout": 300,
    "collectiveTimeout": 600,
    "cpuProcsPerNode": 2,
    "uniformGroup": "node",
    "backend": {
      "gpus": "nccl",
      "cpu": "gloo"
    },
    "rendezvous": {
      "fixed": "static",
      "elastic": "c10d"
    },
    "launcher": {
      "builtin": [
        "python3",
        "-m",
        "ddpctl_trainer.launch"
      ],
      "custom": [
        "torchrun"
      ]
    },
    "trainerDirs": [
      {
        "volume": "checkpoints",
        "flag": "--checkpoint-dir"
      },
      {
        "volume": "data",
        "flag": "--data-dir"
      }
    ],
    "layoutDefaults": [
      {
        "key": "nodes",
        "default": 2
      },
      {
        "key": "gpusPerNode",
        "default": 0
      },
      {
        "key": "procsPerNode",
        "default": null
      }
    ],
    "fabrics": {
      "socket": {
        "resource": null,
        "env": {},
        "capabilities": []
      },
      "infiniband": {
        "resource": "rdma/rdma_shared_device_a",
        "env": {
          "NCCL_IB_DISABLE": "0"
        },
        "capabilities": [
          "IPC_LOCK"
        ]
      },
      "roce": {
        "resource": "rdma/rdma_shared_device_a",
        "env": {
          "NCCL_IB_DISABLE": "0",
          "NCCL_IB_GID_INDEX": "3"
        },
        "capabilities": [
          "IPC_LOCK"
        ]
      },
      "efa": {
        "resource": "vpc.amazonaws.com/efa",
        "env": {
          "FI_PROVIDER": "efa",
          "FI_EFA_USE_DEVICE_RDMA": "1"
        },
        "capabilities": [
          "IPC_LOCK"
        ]
      }
    },
    "preflight": {
      "defaults": {
        "mode": "off",
        "tolerance": 0.6,
        "minGflops": 0,
        "minTflops": 0,
        "minBusbw": 0,
        "minH2d": 0
      },
      "env": {
        "mode": "DDP_TRAINER_PREFLIGHT",
        "tolerance": "DDP_TRAINER_PREFLIGHT_TOLERANCE",
        "minGflops": "DDP_TRAINER_PREFLIGHT_MIN_GFLOPS",
        "minTflops": "DDP_TRAINER_PREFLIGHT_MIN_TFLOPS",
        "minBusbw": "DDP_TRAINER_PREFLIGHT_MIN_BUSBW",
        "minH2d": "DDP_TRAINER_PREFLIGHT_MIN_H2D"
      },
      "fabricEnv": "DDP_TRAINER_FABRIC",
      "downward": [
        {
          "name": "DDP_NODE_NAME",
          "valueFrom": {
            "fieldRef": {
              "fieldPath": "spec.nodeName"
            }
          }
        },
        {
          "name": "DDP_POD_NAME",
          "valueFrom": {
            "fieldRef": {
              "fieldPath": "metadata.name"
            }
          }
        }
      ]
    },
    "stragglers": {
      "defaults": {
        "mode": "warn",
        "tolerance": 0.6,
        "every": 10,
        "windows": 3
      },
      "env": {
        "mode": "DDP_TRAINER_STRAGGLERS",
        "tolerance": "DDP_TRAINER_STRAGGLERS_TOLERANCE",
        "every": "DDP_TRAINER_STRAGGLERS_EVERY",
        "windows": "DDP_TRAINER_STRAGGLERS_WINDOWS"
      },
      "groupEnv": "DDP_NODE_GROUP"
    }
  },
  "pod": {
    "labels": {
      "app.kubernetes.io/component": "trainer",
      "app.kubernetes.io/instance": "%(name)",
      "app.kubernetes.io/managed-by": "ddpctl",
      "app.kubernetes.io/name": "ddp-job"
    },
    "selector": {
      "app.kubernetes.io/instance": "%(name)",
      "app.kubernetes.io/managed-by": "ddpctl"
    },
    "groupLabels": {
      "ddpctl.io/node-group": "%(group)"
    },
    "queueLabels": {
      "kueue.x-k8s.io/queue-name": "%(queue)"
    },
    "priorityLabels": {
      "kueue.x-k8s.io/priority-class": "%(queue)"
    },
    "topology": {
      "required": {
        "kueue.x-k8s.io/podset-required-topology": "%(level)"
      },
      "preferred": {
        "kueue.x-k8s.io/podset-preferred-topology": "%(level)"
      },
      "unconstrained": {
        "kueue.x-k8s.io/podset-unconstrained-topology": "true"
      },
      "slices": {
        "kueue.x-k8s.io/podset-slice-required-topology": "%(level)",
        "kueue.x-k8s.io/podset-slice-size": "%(size)"
      },
      "podsetGroup": "kueue.x-k8s.io/podset-group-name"
    },
    "security": {
      "restricted": {
        "pod": {
          "runAsNonRoot": true,
          "seccompProfile": {
            "type": "RuntimeDefault"
          }
        },
        "container": {
          "allowPrivilegeEscalation": false,
          "capabilities": {
            "drop": [
              "ALL"
            ]
          },
          "runAsNonRoot": true,
          "seccompProfile": {
            "type": "RuntimeDefault"
          }
        }
      },
      "baseline": {
        "pod": {
          "seccompProfile": {
            "type": "RuntimeDefault"
          }
        },
        "container": {
          "allowPrivilegeEscalation": false
        }
      },
      "privileged": {
        "pod": {
          "seccompProfile": {
            "type": "RuntimeDefault"
          }
        },
        "container": {
          "allowPrivilegeEscalation": false
        }
      }
    },
    "shm": {
      "volumes": {
        "name": "dshm",
        "emptyDir": {
          "medium": "Memory",
          "sizeLimit": "%(size)"
        }
      },
      "volume_mounts": {
        "name": "dshm",
        "mountPath": "/dev/shm"
      }
    },
    "nodeRankEntry": {
      "name": "PET_NODE_RANK",
      "valueFrom": {
        "fieldRef": {
          "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
      }
    },
    "gpuToleration": {
      "key": "%(gpu)",
      "operator": "Exists",
      "effect": "NoSchedule"
    },
    "env": {
      "builtin": [
        {
          "name": "DDP_JOB_NAME",
          "value": "%(name)",
          "when": []
        },
        {
          "name": "DDP_TRAINER_BACKEND",
          "value": "%(backend)",
          "when": []
        },
        {
          "name": "DDP_TRAINER_STALL_TIMEOUT",
          "value": "%(stall)",
          "when": [
            "stall"
          ]
        },
        {
          "name": "DDP_TRAINER_TIMEOUT_S",
          "value": "%(collective)",
          "when": [
            "collective"
          ]
        },
        {
          "name": "PYTHONUNBUFFERED",
          "value": "1",
          "when": []
        },
        {
          "name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
          "value": "%(shutdown)",
          "when": []
        },
        {
          "name": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
          "value": "%(checkpointMount)/nccl_trace_rank_",
          "when": [
            "gpus",
            "checkpoints"
          ]
        },
        {
          "name": "TORCH_NCCL_DUMP_ON_TIMEOUT",
          "value": "1",
          "when": [
            "gpus"
          ]
        },
        {
          "name": "TORCH_NCCL_TRACE_BUFFER_SIZE",
          "value": "2000",
          "when": [
            "gpus"
          ]
        }
      ],
      "custom": [
        {
          "name": "DDP_BACKEND",
          "value": "%(backend)",
          "when": []
        },
        {
          "name": "DDP_JOB_NAME",
          "value": "%(name)",
          "when": []
        },
        {
          "name": "DDP_TRAINER_STALL_TIMEOUT",
          "value": "%(stall)",
          "when": [
            "stall"
          ]
        },
        {
          "name": "PYTHONUNBUFFERED",
          "value": "1",
          "when": []
        },
        {
          "name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
          "value": "%(shutdown)",
          "when": []
        },
        {
          "name": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
          "value": "%(checkpointMount)/nccl_trace_rank_",
          "when": [
            "gpus",
            "checkpoints"
          ]
        },
        {
          "name": "TORCH_NCCL_DUMP_ON_TIMEOUT",
          "value": "1",
          "when": [
            "gpus"
          ]
        },
        {
          "name": "TORCH_NCCL_TRACE_BUFFER_SIZE",
          "value": "2000",
          "when": [
            "gpus"
          ]
        }
      ]
    }
  },
  "messages": {
    "groupName": {
      "field": "%(where).name",
      "problem": "'%(name)' is used twice",
      "fix": "give each group its own name"
    },
    "groupProcs": {
      "field": "%(where).procsPerNode",
      "problem": "%(procs) processes cannot share %(gpus) GPUs one each",
      "fix": "leave procsPerNode unset to use one process per GPU"
    },
    "groupGpus": {
      "field": "%(where).gpusPerNode",
      "problem": "%(gpus) GPUs here but %(first) in nodeGroups[0]: one backend serves the whole job",
      "fix": "give every group GPUs, or none (CPU processes with gloo)"
    },
    "groupsNodes": {
      "field": "nodeGroups",
      "problem": "%(total) nodes in all is more than 1024",
      "fix": "use at most 1024 nodes"
    },
    "groupsWithLayout": {
      "field": "nodeGroups",
      "problem": "is set together with %(keys)",
      "fix": "give nodes, gpusPerNode and procsPerNode in each group, or drop nodeGroups"
    },
    "nodes": {
      "field": "nodes",
      "problem": "%(nodes) is more than 1024",
      "fix": "use at most 1024 nodes"
    },
    "nodesRange": {
      "field": "nodes",
      "problem": "min %(min) is more than max %(max)",
      "fix": "write nodes as MIN:MAX with MIN <= MAX"
    },
    "nodesMax": {
      "field": "nodes",
      "problem": "max %(max) is more than 1024",
      "fix": "use at most 1024 nodes"
    },
    "procs": {
      "field": "procsPerNode",
      "problem": "%(procs) processes cannot share %(gpus) GPUs one each",
      "fix": "leave procsPerNode unset to use one process per GPU"
    },
    "entrypoint": {
      "field": "module",
      "problem": "exactly one of module, script or command must be set, got %(chosen)",
      "fix": "set just one of them"
    },
    "backend": {
      "field": "backend",
      "problem": "nccl needs GPUs but gpusPerNode is 0",
      "fix": "use backend gloo (or auto), or set gpusPerNode"
    },
    "secretEnv": {
      "field": "secretEnv",
      "problem": "%(names) is also set in env",
      "fix": "set each variable in one place"
    },
    "mountPath": {
      "field": "volumes.%(volume).mountPath",
      "problem": "%(path) is also used by volume %(other)",
      "fix": "give each volume its own path"
    },
    "checkpointsTrainer": {
      "field": "checkpoints",
      "problem": "is read by the ddpctl trainer only (module ddpctl_trainer)",
      "fix": "give your own script its checkpoint location in args or env, and drop checkpoints"
    },
    "checkpointsVolume": {
      "field": "checkpoints",
      "problem": "is set together with a volume named checkpoints",
      "fix": "keep one: the object store URL or the volume"
    },
    "checkpointsArgs": {
      "field": "checkpoints",
      "problem": "is set together with --checkpoint-dir in args",
      "fix": "keep one of them"
    },
    "topologyModes": {
      "field": "%(where)",
      "problem": "sets both %(first) and %(second)",
      "fix": "keep one of required, preferred and unconstrained"
    },
    "sliceSizeMissing": {
      "field": "%(where).sliceSize",
      "problem": "is missing (with sliceLevel)",
      "fix": "give sliceLevel and sliceSize together"
    },
    "sliceLevelMissing": {
      "field": "%(where).sliceLevel",
      "problem": "is missing (with sliceSize)",
      "fix": "give sliceLevel and sliceSize together"
    },
    "sliceElastic": {
      "field": "topology.sliceSize",
      "problem": "an elastic job's node count changes, so slices cannot divide it",
      "fix": "give a fixed node count, or drop the slice"
    },
    "sliceDivides": {
      "field": "%(where).sliceSize",
      "problem": "%(size) does not divide the group's %(pods) nodes",
      "fix": "use a divisor of %(pods): %(divisors)"
    },
    "collectiveTimeout": {
      "field": "collectiveTimeout",
      "problem": "%(collective) is not above the stall watchdog's %(stall) s (stallTimeout): the trainer would refuse to start",
      "fix": "set collectiveTimeout above %(stall), or lower stallTimeout"
    },
    "stallTimeout": {
      "field": "stallTimeout",
      "problem": "%(stall) is not below the trainer's process-group timeout of 600 s (collectiveTimeout): the trainer would refuse to start",
      "fix": "set stallTimeout below 600, or raise collectiveTimeout"
    },
    "preflightTrainer": {
      "field": "preflight.mode",
      "problem": "%(mode) runs the checks inside the ddpctl trainer (module ddpctl_trainer), which this job does not run",
      "fix": "run them as a job of their own before you submit (`ddpctl check`: the same layout and placement), and leave preflight.mode off"
    },
    "fabricGloo": {
      "field": "fabric",
      "problem": "%(fabric) carries NCCL's traffic, but this job runs gloo (backend %(backend), %(gpus) GPUs per node)",
      "fix": "give the job GPUs (gpusPerNode) with backend auto or nccl, or leave fabric socket"
    },
    "fabricPrivileged": {
      "field": "fabric",
      "problem": "%(fabric) needs the IPC_LOCK capability (RDMA pins the memory it registers), which Pod Security %(podSecurity) forbids",
      "fix": "set podSecurity privileged (--pod-security privileged), in a namespace labelled pod-security.kubernetes.io/enforce=privileged"
    },
    "stragglersReplace": {
      "field": "stragglers.mode",
      "problem": "replace needs recovery: pod (only the straggler's pod is replaced, while the others keep their state)",
      "fix": "add --recovery pod (or auto), or use --stragglers fail and resubmit with --avoid-node NODE"
    },
    "stragglersGang": {
      "field": "stragglers.mode",
      "problem": "replace needs recovery: pod, which this target or layout cannot run (render --explain says why)",
      "fix": "use --stragglers fail and resubmit with --avoid-node NODE"
    },
    "avoidNodesAffinity": {
      "field": "avoidNodes",
      "problem": "cannot be added to affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution, which is not a map of nodeSelectorTerms (a list of terms, each a map)",
      "fix": "write that affinity as Kubernetes takes it, or drop avoidNodes"
    }
  },
  "engines": {
    "job": {
      "containerName": "trainer",
      "portName": "rendezvous",
      "fixedPort": null,
      "subdomain": "%(name)",
      "refuses": [
        {
          "rule": "recoveryOnFailure",
          "field": "restartPolicy",
          "problem": "OnFailure restarts a failed container in place, outside the per-pod limits and failure rules of recovery: pod",
          "fix": "leave restartPolicy unset (Never)"
        },
        {
          "rule": "exitCode",
          "field": "restartPolicy",
          "problem": "ExitCode is the PyTorchJob operator's policy; the job target's pods take Never or OnFailure",
          "fix": "leave restartPolicy unset (failure rules are rendered for you), or use target pytorchjob"
        },
        {
          "rule": "recoveryGroupName",
          "field": "nodeGroups",
          "problem": "a group named 'coordinator' would share its workload's name with the coordinator of recovery: pod",
          "fix": "rename the group"
        },
        {
          "rule": "c10dGroups",
          "field": "rendezvous.mode",
          "problem": "node groups need static rendezvous (c10d numbers nodes in the order they join, so rank 0 could be anywhere)",
          "fix": "leave rendezvous.mode at auto or static"
        },
        {
          "rule": "recoveryCustom",
          "field": "recovery",
          "problem": "pod: only the built-in trainer forms its group again and hands a replacement its state",
          "fix": "leave recovery at gang (whole-group restarts)"
        },
        {
          "rule": "recoveryElastic",
          "field": "recovery",
          "problem": "pod: an elastic layout admits nodes through torchrun's c10d rendezvous instead",
          "fix": "leave recovery at gang (whole-group restarts)"
        },
        {
          "rule": "recoveryBackend",
          "field": "recovery",
          "problem": "pod: a nccl group is not formed again yet (gloo only: gpusPerNode 0)",
          "fix": "leave recovery at gang (whole-group restarts)"
        },
        {
          "rule": "recoveryStrategy",
          "field": "recovery",
          "problem": "pod: only DDP is formed again (every rank holds the whole state); FSDP's shards are not",
          "fix": "leave recovery at gang (whole-group restarts)"
        }
      ],
      "nameTooLong": {
        "field": "name",
        "problem": "'%(name)' makes the job name '%(longest)' (%(length) characters, the limit is 63)",
        "fix": "shorten name to at most %(limit) characters"
      },
      "layouts": {
        "fixed": {
          "hostFirst": "%(name)-0",
          "hostOther": "%(name)-%(index)",
          "rank0": "%(name)-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": null,
          "wiring": {
            "static": {
              "env": {
                "PET_NNODES": "%(nodes)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_MASTER_ADDR": "%(rank0)",
                "PET_MASTER_PORT": "%(port)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": true
            },
            "c10d": {
              "env": {
                "PET_NNODES": "%(nodes)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": "%(rank0):%(port)",
                "PET_RDZV_ID": "%(name)",
                "PET_RDZV_CONF": "join_timeout=%(join),last_call_timeout=%(lastCall)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "grouped": {
          "hostFirst": "%(name)-%(group)-0",
          "hostOther": "%(name)-%(group)-%(index)",
          "rank0": "%(name)-%(group)-0.%(name)",
          "workload": "%(name)-%(group)",
          "replicatedJob": null,
          "wiring": {
            "static": {
              "env": {
                "PET_NNODES": "%(nodes)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_MASTER_ADDR": "%(rank0)",
                "PET_MASTER_PORT": "%(port)",
                "PET_NODE_RANK_OFFSET": "%(offset)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "elastic": {
          "hostFirst": "%(name)-0",
          "hostOther": "%(name)-%(index)",
          "rank0": "%(name)-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": null,
          "wiring": {
            "c10d": {
              "env": {
                "PET_NNODES": "%(min):%(max)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": "%(rank0):%(port)",
                "PET_RDZV_ID": "%(name)",
                "PET_RDZV_CONF": "join_timeout=%(join),last_call_timeout=%(lastCall)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        }
      },
      "groupCommand": {
        "custom": {
          "drop": 1,
          "prefix": [
            "python3",
            "-c",
            "import os, sys; os.environ['PET_NODE_RANK'] = str(int(os.environ['PET_NODE_RANK_OFFSET']) + int(os.environ['JOB_COMPLETION_INDEX'])); sys.argv[0] = 'torchrun'; from torch.distributed.run import main; main()"
          ]
        }
      },
      "restart": {
        "default": {
          "builtin": "Never",
          "custom": "Never"
        },
        "rules": {
          "Never": {
            "builtin": {
              "podFailurePolicy": {
                "rules": [
                  {
                    "action": "FailJob",
                    "onExitCodes": {
                      "containerName": "trainer",
                      "operator": "In",
                      "values": [
                        2,
                        202
                      ]
                    }
                  },
                  {
                    "action": "Ignore",
                    "onPodConditions": [
                      {
                        "type": "DisruptionTarget",
                        "status": "True"
                      }
                    ]
                  },
                  {
                    "action": "Ignore",
                    "onExitCodes": {
                      "containerName": "trainer",
                      "operator": "In",
                      "values": [
                        138,
                        143
                      ]
                    }
                  }
                ]
              },
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": {
                "rules": [
                  {
                    "action": "Ignore",
                    "onPodConditions": [
                      {
                        "type": "DisruptionTarget",
                        "status": "True"
                      }
                    ]
                  }
                ]
              },
              "failureRules": null
            }
          },
          "OnFailure": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          }
        }
      },
      "recovery": {
        "wiring": {
          "PET_NNODES": "1",
          "PET_NPROC_PER_NODE": "%(nproc)",
          "PET_STANDALONE": "1",
          "PET_MAX_RESTARTS": "0",
          "PET_NODE_RANK_OFFSET": "%(offset)",
          "DDP_RANK_OFFSET": "%(rankOffset)",
          "DDP_COORDINATOR": "%(name)-coordinator.%(name):29510",
          "DDP_WORLD_SIZE": "%(worldSize)",
          "DDP_NNODES": "%(nodes)"
        },
        "coordinator": {
          "name": "%(name)-coordinator",
          "hostname": "%(name)-coordinator",
          "container_name": "coordinator",
          "command": [
            "python3",
            "-m",
            "ddpctl_trainer.coordinator",
            "--port",
            "29510",
            "--world-size",
            "%(worldSize)"
          ],
          "args": [],
          "env": [
            {
              "name": "PYTHONUNBUFFERED",
              "value": "1"
            }
          ],
          "port": 29510,
          "port_name": "coordinator",
          "resources": {
            "requests": {
              "cpu": "100m",
              "memory": "512Mi"
            },
            "limits": {
              "memory": "1Gi"
            }
          },
          "labels": {
            "app.kubernetes.io/component": "coordinator"
          },
          "rjob": null,
          "longestName": "%(name)-coordinator"
        },
        "rules": {
          "podFailurePolicy": {
            "rules": [
              {
                "action": "FailJob",
                "onExitCodes": {
                  "containerName": "trainer",
                  "operator": "In",
                  "values": [
                    2,
                    202
                  ]
                }
              },
              {
                "action": "Ignore",
                "onPodConditions": [
                  {
                    "type": "DisruptionTarget",
                    "status": "True"
                  }
                ]
              },
              {
                "action": "Ignore",
                "onExitCodes": {
                  "containerName": "trainer",
                  "operator": "In",
                  "values": [
                    143
                  ]
                }
              }
            ]
          },
          "failurePolicy": null
        },
        "strategyEnv": "DDP_TRAINER_STRATEGY",
        "groupName": "coordinator"
      }
    },
    "pytorchjob": {
      "containerName": "pytorch",
      "portName": "pytorchjob-port",
      "fixedPort": null,
      "subdomain": null,
      "refuses": [
        {
          "rule": "groups",
          "field": "nodeGroups",
          "problem": "the pytorchjob target has two templates, Master (1 node) and Worker: it runs one group, or a first group of 1 node and a second group",
          "fix": "use target job or jobset for this layout",
          "shapes": [
            "pair",
            "more"
          ]
        },
        {
          "rule": "slices",
          "field": "%(where).sliceLevel",
          "problem": "a PyTorchJob's Master (1 pod) and Worker are two Kueue PodSets, which slices cannot span",
          "fix": "use target job, jobset or trainjob for slices, or drop sliceLevel and sliceSize"
        },
        {
          "rule": "recoveryTarget",
          "field": "recovery",
          "problem": "pod on the pytorchjob target: the training operator recreates a failed pod by its own restart rules and gives every pod torchrun's job-wide settings (PET_NNODES, MASTER_ADDR) itself, which a pod that runs its node alone cannot take (not built yet)",
          "fix": "use target job or jobset, or leave recovery at gang (whole-group restarts)"
        }
      ],
      "nameTooLong": {
        "field": "name",
        "problem": "'%(name)' makes the pytorchjob name '%(longest)' (%(length) characters, the limit is 63)",
        "fix": "shorten name to at most %(limit) characters"
      },
      "layouts": {
        "fixed": {
          "hostFirst": "%(name)-master-0",
          "hostOther": "%(name)-worker-%(prevRank)",
          "rank0": "%(name)-master-0",
          "workload": "%(name)",
          "replicatedJob": null,
          "wiring": {
            "static": {
              "env": {
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            },
            "c10d": {
              "env": {
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "grouped": {
          "hostFirst": "%(name)-master-0",
          "hostOther": "%(name)-worker-%(prevRank)",
          "rank0": "%(name)-master-0",
          "workload": "%(name)",
          "replicatedJob": null,
          "wiring": {
            "static": {
              "env": {
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            },
            "c10d": {
              "env": {
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "elastic": {
          "hostFirst": "%(name)-worker-0",
          "hostOther": "%(name)-worker-%(rank)",
          "rank0": "%(name)-worker-0",
          "workload": "%(name)",
          "replicatedJob": null,
          "wiring": {
            "c10d": {
              "env": {},
              "nodeRankEntry": false
            }
          }
        }
      },
      "groupCommand": {
        "builtin": {
          "drop": 3,
          "prefix": [
            "python3",
            "-m",
            "ddpctl_trainer.launch",
            "--nproc-per-node",
            "%(nproc)"
          ]
        },
        "custom": {
          "drop": 1,
          "prefix": [
            "torchrun",
            "--nproc-per-node",
            "%(nproc)"
          ]
        }
      },
      "restart": {
        "default": {
          "builtin": "ExitCode",
          "custom": "Never"
        },
        "rules": {
          "Never": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          },
          "OnFailure": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          },
          "ExitCode": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          }
        }
      },
      "recovery": null
    },
    "jobset": {
      "containerName": "trainer",
      "portName": "rendezvous",
      "fixedPort": null,
      "subdomain": null,
      "refuses": [
        {
          "rule": "recoveryOnFailure",
          "field": "restartPolicy",
          "problem": "OnFailure restarts a failed container in place, outside the per-pod limits and failure rules of recovery: pod",
          "fix": "leave restartPolicy unset (Never)"
        },
        {
          "rule": "exitCode",
          "field": "restartPolicy",
          "problem": "ExitCode is the PyTorchJob operator's policy; the jobset target's pods take Never or OnFailure",
          "fix": "leave restartPolicy unset (failure rules are rendered for you), or use target pytorchjob"
        },
        {
          "rule": "recoveryGroupName",
          "field": "nodeGroups",
          "problem": "a group named 'coordinator' would share its workload's name with the coordinator of recovery: pod",
          "fix": "rename the group"
        },
        {
          "rule": "c10dGroups",
          "field": "rendezvous.mode",
          "problem": "node groups need static rendezvous (c10d numbers nodes in the order they join, so rank 0 could be anywhere)",
          "fix": "leave rendezvous.mode at auto or static"
        },
        {
          "rule": "recoveryCustom",
          "field": "recovery",
          "problem": "pod: only the built-in trainer forms its group again and hands a replacement its state",
          "fix": "leave recovery at gang (whole-group restarts)"
        },
        {
          "rule": "recoveryElastic",
          "field": "recovery",
          "problem": "pod: an elastic layout admits nodes through torchrun's c10d rendezvous instead",
          "fix": "leave recovery at gang (whole-group restarts)"
        },
        {
          "rule": "recoveryBackend",
          "field": "recovery",
          "problem": "pod: a nccl group is not formed again yet (gloo only: gpusPerNode 0)",
          "fix": "leave recovery at gang (whole-group restarts)"
        },
        {
          "rule": "recoveryStrategy",
          "field": "recovery",
          "problem": "pod: only DDP is formed again (every rank holds the whole state); FSDP's shards are not",
          "fix": "leave recovery at gang (whole-group restarts)"
        }
      ],
      "nameTooLong": {
        "field": "name",
        "problem": "'%(name)' makes the jobset name '%(longest)' (%(length) characters, the limit is 63)",
        "fix": "shorten name to at most %(limit) characters"
      },
      "layouts": {
        "fixed": {
          "hostFirst": "%(name)-node-0-0",
          "hostOther": "%(name)-node-0-%(index)",
          "rank0": "%(name)-node-0-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": "node",
          "wiring": {
            "static": {
              "env": {
                "PET_NNODES": "%(nodes)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_MASTER_ADDR": "%(rank0)",
                "PET_MASTER_PORT": "%(port)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": true
            },
            "c10d": {
              "env": {
                "PET_NNODES": "%(nodes)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": "%(rank0):%(port)",
                "PET_RDZV_ID": "%(name)",
                "PET_RDZV_CONF": "join_timeout=%(join),last_call_timeout=%(lastCall)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "grouped": {
          "hostFirst": "%(name)-%(group)-0-0",
          "hostOther": "%(name)-%(group)-0-%(index)",
          "rank0": "%(name)-%(group)-0-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": "%(group)",
          "wiring": {
            "static": {
              "env": {
                "PET_NNODES": "%(nodes)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_MASTER_ADDR": "%(rank0)",
                "PET_MASTER_PORT": "%(port)",
                "PET_NODE_RANK_OFFSET": "%(offset)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "elastic": {
          "hostFirst": "%(name)-node-0-0",
          "hostOther": "%(name)-node-0-%(index)",
          "rank0": "%(name)-node-0-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": "node",
          "wiring": {
            "c10d": {
              "env": {
                "PET_NNODES": "%(min):%(max)",
                "PET_NPROC_PER_NODE": "%(nproc)",
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": "%(rank0):%(port)",
                "PET_RDZV_ID": "%(name)",
                "PET_RDZV_CONF": "join_timeout=%(join),last_call_timeout=%(lastCall)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        }
      },
      "groupCommand": {
        "custom": {
          "drop": 1,
          "prefix": [
            "python3",
            "-c",
            "import os, sys; os.environ['PET_NODE_RANK'] = str(int(os.environ['PET_NODE_RANK_OFFSET']) + int(os.environ['JOB_COMPLETION_INDEX'])); sys.argv[0] = 'torchrun'; from torch.distributed.run import main; main()"
          ]
        }
      },
      "restart": {
        "default": {
          "builtin": "Never",
          "custom": "Never"
        },
        "rules": {
          "Never": {
            "builtin": {
              "podFailurePolicy": {
                "rules": [
                  {
                    "action": "FailJob",
                    "onExitCodes": {
                      "containerName": "trainer",
                      "operator": "In",
                      "values": [
                        2,
                        202
                      ]
                    }
                  },
                  {
                    "action": "FailJob",
                    "onPodConditions": [
                      {
                        "type": "DisruptionTarget",
                        "status": "True"
                      }
                    ]
                  },
                  {
                    "action": "FailJob",
                    "onExitCodes": {
                      "containerName": "trainer",
                      "operator": "In",
                      "values": [
                        143
                      ]
                    }
                  }
                ]
              },
              "failureRules": [
                {
                  "name": "UsageErrorOrStraggler",
                  "action": "FailJobSet",
                  "onJobFailureReasons": [
                    "PodFailurePolicy"
                  ],
                  "onJobFailureMessagePatterns": [
                    "matching FailJob rule at index (0)$"
                  ]
                },
                {
                  "name": "Preempted",
                  "action": "RestartJobSetAndIgnoreMaxRestarts",
                  "onJobFailureReasons": [
                    "PodFailurePolicy"
                  ],
                  "onJobFailureMessagePatterns": [
                    "matching FailJob rule at index (1|2)$"
                  ]
                }
              ]
            },
            "custom": {
              "podFailurePolicy": {
                "rules": [
                  {
                    "action": "FailJob",
                    "onPodConditions": [
                      {
                        "type": "DisruptionTarget",
                        "status": "True"
                      }
                    ]
                  }
                ]
              },
              "failureRules": [
                {
                  "name": "Preempted",
                  "action": "RestartJobSetAndIgnoreMaxRestarts",
                  "onJobFailureReasons": [
                    "PodFailurePolicy"
                  ],
                  "onJobFailureMessagePatterns": [
                    "matching FailJob rule at index (0)$"
                  ]
                }
              ]
            }
          },
          "OnFailure": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          }
        }
      },
      "recovery": {
        "wiring": {
          "PET_NNODES": "1",
          "PET_NPROC_PER_NODE": "%(nproc)",
          "PET_STANDALONE": "1",
          "PET_MAX_RESTARTS": "0",
          "PET_NODE_RANK_OFFSET": "%(offset)",
          "DDP_RANK_OFFSET": "%(rankOffset)",
          "DDP_COORDINATOR": "%(name)-coordinator-0-0.%(name):29510",
          "DDP_WORLD_SIZE": "%(worldSize)",
          "DDP_NNODES": "%(nodes)"
        },
        "coordinator": {
          "name": "%(name)-coordinator-0-0",
          "hostname": "%(name)-coordinator-0-0",
          "container_name": "coordinator",
          "command": [
            "python3",
            "-m",
            "ddpctl_trainer.coordinator",
            "--port",
            "29510",
            "--world-size",
            "%(worldSize)"
          ],
          "args": [],
          "env": [
            {
              "name": "PYTHONUNBUFFERED",
              "value": "1"
            }
          ],
          "port": 29510,
          "port_name": "coordinator",
          "resources": {
            "requests": {
              "cpu": "100m",
              "memory": "512Mi"
            },
            "limits": {
              "memory": "1Gi"
            }
          },
          "labels": {
            "app.kubernetes.io/component": "coordinator"
          },
          "rjob": "coordinator",
          "longestName": "%(name)-coordinator-0-0"
        },
        "rules": {
          "podFailurePolicy": {
            "rules": [
              {
                "action": "FailJob",
                "onExitCodes": {
                  "containerName": "trainer",
                  "operator": "In",
                  "values": [
                    2,
                    202
                  ]
                }
              },
              {
                "action": "Ignore",
                "onPodConditions": [
                  {
                    "type": "DisruptionTarget",
                    "status": "True"
                  }
                ]
              },
              {
                "action": "Ignore",
                "onExitCodes": {
                  "containerName": "trainer",
                  "operator": "In",
                  "values": [
                    143
                  ]
                }
              }
            ]
          },
          "failurePolicy": {
            "maxRestarts": 0
          }
        },
        "strategyEnv": "DDP_TRAINER_STRATEGY",
        "groupName": "coordinator"
      }
    },
    "trainjob": {
      "containerName": "node",
      "portName": "rendezvous",
      "fixedPort": 29500,
      "subdomain": null,
      "refuses": [
        {
          "rule": "elastic",
          "field": "nodes",
          "problem": "the trainjob target has no elastic policy (Trainer v2 runs a fixed node count)",
          "fix": "give a fixed count, or use target job, jobset or pytorchjob"
        },
        {
          "rule": "groups",
          "field": "nodeGroups",
          "problem": "the trainjob target cannot run node groups: Trainer v2 has a single numProcPerNode for all nodes",
          "fix": "use target job, jobset or pytorchjob",
          "shapes": [
            "pairSingleFirst",
            "pair",
            "more"
          ]
        },
        {
          "rule": "priorityClassName",
          "field": "priorityClassName",
          "problem": "the trainjob target cannot set it (TrainJob has no such field)",
          "fix": "set it in the training runtime, or use target job, jobset or pytorchjob"
        },
        {
          "rule": "envFromSecrets",
          "field": "envFromSecrets",
          "problem": "the trainjob target cannot load whole Secrets (TrainJob's trainer has no envFrom)",
          "fix": "list the variables in secretEnv, or use target job, jobset or pytorchjob"
        },
        {
          "rule": "recoveryTarget",
          "field": "recovery",
          "problem": "pod on the trainjob target: the runtime's JobSet template sets its child Jobs' failure limits and a TrainJob cannot override them; replacing one pod alone would take a ClusterTrainingRuntime of its own, with per-index limits and a coordinator",
          "fix": "use target job or jobset, or leave recovery at gang (whole-group restarts)"
        }
      ],
      "nameTooLong": {
        "field": "name",
        "problem": "'%(name)' makes the trainjob name '%(longest)' (%(length) characters, the limit is 63)",
        "fix": "shorten name to at most %(limit) characters"
      },
      "layouts": {
        "fixed": {
          "hostFirst": "%(name)-node-0-0",
          "hostOther": "%(name)-node-0-%(index)",
          "rank0": "%(name)-node-0-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": "node",
          "wiring": {
            "static": {
              "env": {
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            },
            "c10d": {
              "env": {
                "PET_RDZV_CONF": "join_timeout=%(join),last_call_timeout=%(lastCall)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        },
        "grouped": {
          "hostFirst": "%(name)-node-0-0",
          "hostOther": "%(name)-node-0-%(index)",
          "rank0": "%(name)-node-0-0.%(name)",
          "workload": "%(name)",
          "replicatedJob": "node",
          "wiring": {
            "static": {
              "env": {
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            },
            "c10d": {
              "env": {
                "PET_RDZV_CONF": "join_timeout=%(join),last_call_timeout=%(lastCall)",
                "PET_MAX_RESTARTS": "%(maxRestarts)"
              },
              "nodeRankEntry": false
            }
          }
        }
      },
      "groupCommand": {},
      "restart": {
        "default": {
          "builtin": "Never",
          "custom": "Never"
        },
        "rules": {
          "Never": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          },
          "OnFailure": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          },
          "ExitCode": {
            "builtin": {
              "podFailurePolicy": null,
              "failureRules": null
            },
            "custom": {
              "podFailurePolicy": null,
              "failureRules": null
            }
          }
        }
      },
      "recovery": null
    }
  }
}
{{- end -}}
