{{/*
Helpers of the ddp-job chart. They mirror ddpctl's Python (cli/spec.py derived values and
cli/render.py `view()`) so that the chart renders the same objects as `ddpctl render`.
`ddp-job.view` computes every derived value once, as a dict (returned as JSON); the templates
only lay it out. Every value reaches the YAML through `ddp-job.json`, so no string a user gives
(quotes, newlines, `{{`, `: `) can change a document's structure.
*/}}

{{/*
ddp-job.json: any value as one JSON (= YAML flow) node. Go's JSON encoder escapes control
characters below U+0020 and U+2028/U+2029 but not U+007F-U+009F, which YAML parsers refuse
(or read as line breaks), so those are escaped here too.
*/}}
{{- define "ddp-job.json" -}}
{{- $out := toJson . -}}
{{- range $i := until 33 -}}
{{- $code := add 127 $i -}}
{{- $out = replace (printf "%c" $code) (printf "\\u%04x" $code) $out -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/* ddp-job.jsonList: a list as JSON, `[]` when empty (sprig's empty `list` is a nil slice: `null`). */}}
{{- define "ddp-job.jsonList" -}}
{{- if . -}}{{- include "ddp-job.json" . -}}{{- else -}}[]{{- end -}}
{{- end -}}

{{/* ddp-job.fail: stop rendering with "<key>: <problem> (<fix>)", like ddpctl's SpecError. */}}
{{- define "ddp-job.fail" -}}
{{- fail (printf "%s: %s (%s)" (index . 0) (index . 1) (index . 2)) -}}
{{- end -}}

{{/* ddp-job.envValue: env values are strings; a YAML number is kept as written (4 -> "4"). */}}
{{- define "ddp-job.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
ddp-job.view: every derived value, as JSON (use `include "ddp-job.view" . | fromJson`).
Mirrors JobSpec's properties and render.view(); rules JSON Schema cannot express fail here.
*/}}
{{- define "ddp-job.view" -}}
{{- $V := .Values -}}
{{- $name := $V.name -}}
{{- $target := $V.target -}}
{{- $trainer := "ddpctl_trainer" -}}
{{- /* NODE_RANK_LAUNCHER of cli/engines/base.py, verbatim. */ -}}
{{- $launcher := "import os, sys; os.environ['PET_NODE_RANK'] = str(int(os.environ['PET_NODE_RANK_OFFSET']) + int(os.environ['JOB_COMPLETION_INDEX'])); sys.argv[0] = 'torchrun'; from torch.distributed.run import main; main()" -}}
{{- $res := default dict $V.resources -}}
{{- $gpuResource := default "nvidia.com/gpu" $res.gpuResource -}}

{{- /* Layout: node groups (JobSpec.groups), or nodes is N or "MIN:MAX" (JobSpec.parse_nodes). */ -}}
{{- $elastic := false -}}
{{- $nodes := 0 -}}
{{- $min := 0 -}}
{{- $max := 0 -}}
{{- $gpus := 0 -}}
{{- $nproc := 0 -}}
{{- $groups := list -}}
{{- $grouped := false -}}
{{- if $V.nodeGroups -}}
{{- $grouped = true -}}
{{- $seen := dict -}}
{{- $firstGpus := -1 -}}
{{- range $i, $g := $V.nodeGroups -}}
{{- $where := printf "nodeGroups[%d]" $i -}}
{{- if hasKey $seen $g.name -}}
{{- include "ddp-job.fail" (list (printf "%s.name" $where) (printf "%q is used twice" $g.name) "give each group its own name") -}}
{{- end -}}
{{- $_ := set $seen $g.name true -}}
{{- $gn := int64 $g.nodes -}}
{{- $gg := int64 $g.gpusPerNode -}}
{{- $gp := ternary $gg (int64 2) (gt $gg 0) -}}
{{- if not (kindIs "invalid" $g.procsPerNode) -}}
{{- $gp = int64 $g.procsPerNode -}}
{{- if and (gt $gg 0) (gt $gp $gg) -}}
{{- include "ddp-job.fail" (list (printf "%s.procsPerNode" $where) (printf "%d processes cannot share %d GPUs one each" $gp $gg) "leave procsPerNode unset to use one process per GPU") -}}
{{- end -}}
{{- end -}}
{{- if eq $i 0 -}}{{- $firstGpus = $gg -}}{{- end -}}
{{- if ne (gt $gg 0) (gt $firstGpus 0) -}}
{{- include "ddp-job.fail" (list (printf "%s.gpusPerNode" $where) (printf "%d GPUs here but %d in nodeGroups[0]: one backend serves the whole job" $gg $firstGpus) "give every group GPUs, or none (CPU processes with gloo)") -}}
{{- end -}}
{{- $groups = append $groups (dict "name" $g.name "nodes" $gn "gpus" $gg "nproc" $gp "nodeSelector" (default dict $g.nodeSelector) "tolerations" (default list $g.tolerations) "resources" (default dict $g.resources) "gpuResource" (default "" $g.gpuResource) "topology" $g.topology "topologyAt" (printf "%s.topology" $where)) -}}
{{- $nodes = add $nodes $gn -}}
{{- if gt $gg $gpus -}}{{- $gpus = $gg -}}{{- end -}}
{{- end -}}
{{- if gt $nodes 1024 -}}{{- include "ddp-job.fail" (list "nodeGroups" (printf "%d nodes in all is more than 1024" $nodes) "use at most 1024 nodes") -}}{{- end -}}
{{- $nproc = (index $groups 0).nproc -}}
{{- if and (eq $target "trainjob") (gt (len $groups) 1) -}}
{{- include "ddp-job.fail" (list "nodeGroups" "the trainjob target cannot run node groups: Trainer v2 has a single numProcPerNode for all nodes" "use target job, jobset or pytorchjob") -}}
{{- end -}}
{{- if and (eq $target "pytorchjob") (or (gt (len $groups) 2) (and (eq (len $groups) 2) (ne (int64 (index $groups 0).nodes) 1))) -}}
{{- include "ddp-job.fail" (list "nodeGroups" "the pytorchjob target has two templates, Master (1 node) and Worker: it runs one group, or a first group of 1 node and a second group" "use target job or jobset for this layout") -}}
{{- end -}}
{{- else -}}
{{- if kindIs "string" $V.nodes -}}
{{- $text := trim $V.nodes -}}
{{- if regexMatch "^[0-9]+:[0-9]+$" $text -}}
{{- $parts := splitList ":" $text -}}
{{- $elastic = true -}}
{{- $min = int64 (atoi (index $parts 0)) -}}
{{- $max = int64 (atoi (index $parts 1)) -}}
{{- $nodes = $max -}}
{{- else if regexMatch "^[0-9]+$" $text -}}
{{- $nodes = int64 (atoi $text) -}}
{{- else -}}
{{- include "ddp-job.fail" (list "nodes" (printf "%q is not a node count" $V.nodes) "use a number like 2 or a range like 1:4") -}}
{{- end -}}
{{- else -}}
{{- $nodes = int64 $V.nodes -}}
{{- end -}}
{{- if $elastic -}}
{{- if lt $min 1 -}}{{- include "ddp-job.fail" (list "minNodes" (printf "%d must be an integer >= 1" $min) "set minNodes to a whole number of at least 1") -}}{{- end -}}
{{- if lt $max 1 -}}{{- include "ddp-job.fail" (list "maxNodes" (printf "%d must be an integer >= 1" $max) "set maxNodes to a whole number of at least 1") -}}{{- end -}}
{{- if gt $min $max -}}{{- include "ddp-job.fail" (list "nodes" (printf "min %d is more than max %d" $min $max) "write nodes as MIN:MAX with MIN <= MAX") -}}{{- end -}}
{{- if eq $target "trainjob" -}}{{- include "ddp-job.fail" (list "nodes" "the trainjob target has no elastic policy (Trainer v2 runs a fixed node count)" "give a fixed count, or use target job, jobset or pytorchjob") -}}{{- end -}}
{{- if gt $max 1024 -}}{{- include "ddp-job.fail" (list "nodes" (printf "max %d is more than 1024" $max) "use at most 1024 nodes") -}}{{- end -}}
{{- else -}}
{{- if lt $nodes 1 -}}{{- include "ddp-job.fail" (list "nodes" (printf "%d must be an integer >= 1" $nodes) "set nodes to a whole number of at least 1") -}}{{- end -}}
{{- if gt $nodes 1024 -}}{{- include "ddp-job.fail" (list "nodes" (printf "%d is more than 1024" $nodes) "use at most 1024 nodes") -}}{{- end -}}
{{- end -}}
{{- $gpus = int64 (default 0 $V.gpusPerNode) -}}
{{- $nproc = ternary $gpus (int64 2) (gt $gpus 0) -}}
{{- if not (kindIs "invalid" $V.procsPerNode) -}}
{{- $nproc = int64 $V.procsPerNode -}}
{{- if and (gt $gpus 0) (gt $nproc $gpus) -}}
{{- include "ddp-job.fail" (list "procsPerNode" (printf "%d processes cannot share %d GPUs one each" $nproc $gpus) "leave procsPerNode unset to use one process per GPU") -}}
{{- end -}}
{{- end -}}
{{- $groups = list (dict "name" "node" "nodes" $nodes "gpus" $gpus "nproc" $nproc "nodeSelector" dict "tolerations" list "resources" dict "gpuResource" "" "topology" nil) -}}
{{- end -}}
{{- $replicas := ternary $max $nodes $elastic -}}
{{- $nnodes := ternary (printf "%d:%d" $min $max) (printf "%d" $nodes) $elastic -}}

{{- /* Backend and rendezvous. */ -}}
{{- $backend := $V.backend -}}
{{- if eq $backend "auto" -}}{{- $backend = ternary "nccl" "gloo" (gt $gpus 0) -}}{{- end -}}
{{- if and (eq $V.backend "nccl") (eq $gpus 0) -}}
{{- include "ddp-job.fail" (list "backend" "nccl needs GPUs but gpusPerNode is 0" "use backend gloo (or auto), or set gpusPerNode") -}}
{{- end -}}
{{- $rdzv := $V.rendezvous -}}
{{- if and $elastic (eq $rdzv.mode "static") -}}
{{- include "ddp-job.fail" (list "rendezvous.mode" "an elastic job (nodes MIN:MAX) cannot use static rendezvous" "use mode c10d or auto") -}}
{{- end -}}
{{- $mode := $rdzv.mode -}}
{{- if eq $mode "auto" -}}{{- $mode = ternary "c10d" "static" $elastic -}}{{- end -}}
{{- if and $grouped (has $target (list "job" "jobset")) (ne $mode "static") -}}
{{- include "ddp-job.fail" (list "rendezvous.mode" "node groups need static rendezvous (c10d numbers nodes in the order they join, so rank 0 could be anywhere)" "leave rendezvous.mode at auto or static") -}}
{{- end -}}

{{- /* Names the engine derives (cli/engines: workload names, pod hostnames, rank 0's DNS name). */ -}}
{{- $first := index $groups 0 -}}
{{- $longest := "" -}}
{{- $rank0 := "" -}}
{{- if eq $target "pytorchjob" -}}
{{- if $elastic -}}
{{- $rank0 = printf "%s-worker-0" $name -}}
{{- $longest = printf "%s-worker-%d" $name (sub $replicas 1) -}}
{{- else -}}
{{- $rank0 = printf "%s-master-0" $name -}}
{{- $longest = printf "%s-master-0" $name -}}
{{- if and (gt $replicas 1) (gt (len (printf "%s-worker-%d" $name (sub $replicas 2))) (len $longest)) -}}
{{- $longest = printf "%s-worker-%d" $name (sub $replicas 2) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- range $i, $g := $groups -}}
{{- $host := "" -}}
{{- $host0 := "" -}}
{{- if eq $target "job" -}}
{{- $wname := ternary (printf "%s-%s" $name $g.name) $name $grouped -}}
{{- $_ := set $g "workload" $wname -}}
{{- $host = printf "%s-%d" $wname (sub (int64 $g.nodes) 1) -}}
{{- $host0 = printf "%s-0" $wname -}}
{{- else -}}
{{- $rjob := ternary $g.name "node" (and $grouped (eq $target "jobset")) -}}
{{- $_ := set $g "rjob" $rjob -}}
{{- $host = printf "%s-%s-0-%d" $name $rjob (sub (int64 $g.nodes) 1) -}}
{{- $host0 = printf "%s-%s-0-0" $name $rjob -}}
{{- end -}}
{{- if eq $i 0 -}}{{- $rank0 = printf "%s.%s" $host0 $name -}}{{- end -}}
{{- if gt (len $host) (len $longest) -}}{{- $longest = $host -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (len $longest) 63 -}}
{{- include "ddp-job.fail" (list "name" (printf "%q makes the %s name %q (%d characters, the limit is 63)" $name $target $longest (len $longest)) (printf "shorten name to at most %d characters" (sub 63 (sub (len $longest) (len $name))))) -}}
{{- end -}}
{{- $port := ternary (int64 29500) (int64 $rdzv.port) (eq $target "trainjob") -}}

{{- /* Entrypoint: command, else torchrun of script, else of module (see docs in values.yaml). */ -}}
{{- /* The ddpctl trainer runs under its launcher (JobSpec.launcher): torchrun whose exit code keeps the reason. */ -}}
{{- $command := default list $V.command -}}
{{- $module := "" -}}
{{- $entrypoint := list -}}
{{- $usesLauncher := and (not $command) (not $V.script) (eq (toString $V.module) $trainer) -}}
{{- $torchrun := ternary (list "python3" "-m" "ddpctl_trainer.launch") (list "torchrun") $usesLauncher -}}
{{- if $command -}}
{{- $entrypoint = $command -}}
{{- else if $V.script -}}
{{- $entrypoint = concat $torchrun (list $V.script) -}}
{{- else if $V.module -}}
{{- $module = $V.module -}}
{{- $entrypoint = concat $torchrun (list "-m" $module) -}}
{{- else -}}
{{- include "ddp-job.fail" (list "module" "exactly one of module, script or command must be set, got none" "set just one of them") -}}
{{- end -}}
{{- $usesTrainer := eq $module $trainer -}}
{{- $args := default list $V.args -}}
{{- $volumes := default dict $V.volumes -}}
{{- $extra := list -}}
{{- if $usesTrainer -}}
{{- if and (hasKey $volumes "checkpoints") (not (has "--checkpoint-dir" $args)) -}}
{{- $extra = concat $extra (list "--checkpoint-dir" (get $volumes "checkpoints").mountPath) -}}
{{- end -}}
{{- if and (hasKey $volumes "data") (not (has "--data-dir" $args)) -}}
{{- $extra = concat $extra (list "--data-dir" (get $volumes "data").mountPath) -}}
{{- end -}}
{{- end -}}

{{- /* Environment (the engine's torchrun_env, JobSpec.container_env; render._env_list): the job-wide part. */ -}}
{{- $wiredByUs := has $target (list "job" "jobset") -}}
{{- $env := dict -}}
{{- if $wiredByUs -}}
{{- $_ := set $env "PET_NNODES" $nnodes -}}
{{- if eq $mode "static" -}}
{{- $_ := set $env "PET_MASTER_ADDR" $rank0 -}}
{{- $_ := set $env "PET_MASTER_PORT" (toString $port) -}}
{{- else -}}
{{- $_ := set $env "PET_RDZV_BACKEND" "c10d" -}}
{{- $_ := set $env "PET_RDZV_ENDPOINT" (printf "%s:%d" $rank0 $port) -}}
{{- $_ := set $env "PET_RDZV_ID" $name -}}
{{- end -}}
{{- end -}}
{{- if and (eq $mode "c10d") (ne $target "pytorchjob") -}}
{{- $_ := set $env "PET_RDZV_CONF" (printf "join_timeout=%d,last_call_timeout=%d" (int64 $rdzv.joinTimeout) (int64 $rdzv.lastCallTimeout)) -}}
{{- end -}}
{{- if or (ne $target "pytorchjob") (not $elastic) -}}
{{- $_ := set $env "PET_MAX_RESTARTS" (toString (int64 $rdzv.maxRestarts)) -}}
{{- end -}}
{{- $_ := set $env (ternary "DDP_TRAINER_BACKEND" "DDP_BACKEND" $usesTrainer) $backend -}}
{{- $_ := set $env "DDP_JOB_NAME" $name -}}
{{- $_ := set $env "PYTHONUNBUFFERED" "1" -}}
{{- $_ := set $env "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" (toString (sub (int64 $V.gracePeriod) 10)) -}}
{{- if and $usesTrainer (not (kindIs "invalid" $V.collectiveTimeout)) -}}
{{- $stall := 300 -}}
{{- if not (kindIs "invalid" $V.stallTimeout) -}}{{- $stall = int64 $V.stallTimeout -}}{{- end -}}
{{- if and (ne (int64 $stall) 0) (ge (int64 $stall) (int64 $V.collectiveTimeout)) -}}
{{- include "ddp-job.fail" (list "collectiveTimeout" (printf "%d is not above the stall watchdog's %d s (stallTimeout): the trainer would refuse to start" (int64 $V.collectiveTimeout) (int64 $stall)) (printf "set collectiveTimeout above %d, or lower stallTimeout" (int64 $stall))) -}}
{{- end -}}
{{- $_ := set $env "DDP_TRAINER_TIMEOUT_S" (toString (int64 $V.collectiveTimeout)) -}}
{{- else if and $usesTrainer (not (kindIs "invalid" $V.stallTimeout)) -}}
{{- if ge (int64 $V.stallTimeout) 600 -}}
{{- include "ddp-job.fail" (list "stallTimeout" (printf "%d is not below the trainer's process-group timeout of 600 s (collectiveTimeout): the trainer would refuse to start" (int64 $V.stallTimeout)) "set stallTimeout below 600, or raise collectiveTimeout") -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "invalid" $V.stallTimeout) -}}
{{- $_ := set $env "DDP_TRAINER_STALL_TIMEOUT" (toString (int64 $V.stallTimeout)) -}}
{{- end -}}
{{- if gt $gpus 0 -}}
{{- $_ := set $env "TORCH_NCCL_TRACE_BUFFER_SIZE" "2000" -}}
{{- $_ := set $env "TORCH_NCCL_DUMP_ON_TIMEOUT" "1" -}}
{{- if hasKey $volumes "checkpoints" -}}
{{- $_ := set $env "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" (printf "%s/nccl_trace_rank_" (trimSuffix "/" (get $volumes "checkpoints").mountPath)) -}}
{{- end -}}
{{- end -}}
{{- $secretEnv := default dict $V.secretEnv -}}
{{- $userEnv := dict -}}
{{- range $key, $value := (default dict $V.env) -}}
{{- if hasKey $secretEnv $key -}}
{{- include "ddp-job.fail" (list "secretEnv" (printf "%s is also set in env" $key) "set each variable in one place") -}}
{{- end -}}
{{- $_ := set $userEnv $key (include "ddp-job.envValue" $value) -}}
{{- end -}}
{{- $envFrom := list -}}
{{- range $secret := default list $V.envFromSecrets -}}
{{- $envFrom = append $envFrom (dict "secretRef" (dict "name" $secret)) -}}
{{- end -}}

{{- /* Pod and container securityContext (render._security). */ -}}
{{- $podSC := dict "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- $containerSC := dict "allowPrivilegeEscalation" false "capabilities" (dict "drop" (list "ALL")) "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- if eq $V.podSecurity "baseline" -}}
{{- $podSC = dict "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- $containerSC = dict "allowPrivilegeEscalation" false -}}
{{- end -}}

{{- /* Volumes: the memory-backed /dev/shm first, then the PVCs in name order. */ -}}
{{- $podVolumes := list (dict "name" "dshm" "emptyDir" (dict "medium" "Memory" "sizeLimit" $V.shmSize)) -}}
{{- $mounts := list (dict "name" "dshm" "mountPath" "/dev/shm") -}}
{{- $mountPaths := dict -}}
{{- range $vname, $vol := $volumes -}}
{{- if hasKey $mountPaths $vol.mountPath -}}
{{- include "ddp-job.fail" (list (printf "volumes.%s.mountPath" $vname) (printf "%s is also used by volume %s" $vol.mountPath (get $mountPaths $vol.mountPath)) "give each volume its own path") -}}
{{- end -}}
{{- $_ := set $mountPaths $vol.mountPath $vname -}}
{{- $readOnly := default false $vol.readOnly -}}
{{- $podVolumes = append $podVolumes (dict "name" $vname "persistentVolumeClaim" (dict "claimName" $vol.claimName "readOnly" $readOnly)) -}}
{{- $mounts = append $mounts (dict "name" $vname "mountPath" $vol.mountPath "readOnly" $readOnly) -}}
{{- end -}}

{{- /* Labels (JobSpec.object_labels: the user's, then ours, ours win) and the queue label. */ -}}
{{- $labels := dict -}}
{{- range $key, $value := (default dict $V.labels) -}}{{- $_ := set $labels $key $value -}}{{- end -}}
{{- $_ := set $labels "app.kubernetes.io/name" "ddp-job" -}}
{{- $_ := set $labels "app.kubernetes.io/instance" $name -}}
{{- $_ := set $labels "app.kubernetes.io/component" "trainer" -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" "ddpctl" -}}
{{- $topLabels := deepCopy $labels -}}
{{- if $V.queue -}}{{- $_ := set $topLabels "kueue.x-k8s.io/queue-name" $V.queue -}}{{- end -}}
{{- if $V.workloadPriorityClass -}}{{- $_ := set $topLabels "kueue.x-k8s.io/priority-class" $V.workloadPriorityClass -}}{{- end -}}

{{- if and (eq $target "trainjob") $V.priorityClassName -}}
{{- include "ddp-job.fail" (list "priorityClassName" "the trainjob target cannot set it (TrainJob has no such field)" "set it in the training runtime, or use target job, jobset or pytorchjob") -}}
{{- end -}}
{{- if and (eq $target "trainjob") $V.envFromSecrets -}}
{{- include "ddp-job.fail" (list "envFromSecrets" "the trainjob target cannot load whole Secrets (TrainJob's trainer has no envFrom)" "list the variables in secretEnv, or use target job, jobset or pytorchjob") -}}
{{- end -}}
{{- $pullSecrets := list -}}
{{- range $secret := default list $V.imagePullSecrets -}}
{{- $pullSecrets = append $pullSecrets (dict "name" $secret) -}}
{{- end -}}
{{- $containerNames := dict "job" "trainer" "jobset" "trainer" "pytorchjob" "pytorch" "trainjob" "node" -}}

{{- /* Failure rules (the engines' pod_restart_policy, pod_failure_policy, failure_policy; exit codes in ddpctl.exit_codes). */ -}}
{{- $restartPolicy := $V.restartPolicy -}}
{{- if kindIs "invalid" $restartPolicy -}}
{{- $restartPolicy = ternary (ternary "ExitCode" "Never" $usesLauncher) "Never" (eq $target "pytorchjob") -}}
{{- else if and (eq $restartPolicy "ExitCode") (has $target (list "job" "jobset")) -}}
{{- include "ddp-job.fail" (list "restartPolicy" (printf "ExitCode is the PyTorchJob operator's policy; the %s target's pods take Never or OnFailure" $target) "leave restartPolicy unset (failure rules are rendered for you), or use target pytorchjob") -}}
{{- end -}}
{{- $disruption := dict "onPodConditions" (list (dict "type" "DisruptionTarget" "status" "True")) -}}
{{- $usageCodes := dict "containerName" "trainer" "operator" "In" "values" (list 2) -}}
{{- $podFailurePolicy := dict -}}
{{- $failurePolicy := dict "maxRestarts" (int64 $V.backoffLimit) -}}
{{- if and (eq $restartPolicy "Never") (eq $target "job") -}}
{{- $rules := list (merge (dict "action" "Ignore") $disruption) -}}
{{- if $usesLauncher -}}
{{- $rules = concat (list (dict "action" "FailJob" "onExitCodes" $usageCodes)) $rules (list (dict "action" "Ignore" "onExitCodes" (dict "containerName" "trainer" "operator" "In" "values" (list 138 143)))) -}}
{{- end -}}
{{- $podFailurePolicy = dict "rules" $rules -}}
{{- else if and (eq $restartPolicy "Never") (eq $target "jobset") -}}
{{- $rules := list (merge (dict "action" "FailJob") $disruption) -}}
{{- $preempted := "0" -}}
{{- if $usesLauncher -}}
{{- $rules = concat (list (dict "action" "FailJob" "onExitCodes" $usageCodes)) $rules (list (dict "action" "FailJob" "onExitCodes" (dict "containerName" "trainer" "operator" "In" "values" (list 143)))) -}}
{{- $preempted = "1|2" -}}
{{- end -}}
{{- $podFailurePolicy = dict "rules" $rules -}}
{{- $jsRules := list -}}
{{- if $usesLauncher -}}
{{- $jsRules = append $jsRules (dict "name" "UsageError" "action" "FailJobSet" "onJobFailureReasons" (list "PodFailurePolicy") "onJobFailureMessagePatterns" (list "matching FailJob rule at index (0)$")) -}}
{{- end -}}
{{- $jsRules = append $jsRules (dict "name" "Preempted" "action" "RestartJobSetAndIgnoreMaxRestarts" "onJobFailureReasons" (list "PodFailurePolicy") "onJobFailureMessagePatterns" (list (printf "matching FailJob rule at index (%s)$" $preempted))) -}}
{{- $_ := set $failurePolicy "rules" $jsRules -}}
{{- end -}}
{{- $view := dict
  "name" $name
  "namespace" $V.namespace
  "target" $target
  "topLabels" $topLabels
  "labels" $labels
  "annotations" (default dict $V.annotations)
  "selector" (dict "app.kubernetes.io/instance" $name "app.kubernetes.io/managed-by" "ddpctl")
  "containerName" (get $containerNames $target)
  "image" $V.image
  "pullPolicy" $V.imagePullPolicy
  "imagePullSecrets" $pullSecrets
  "args" (concat $extra $args)
  "envFrom" $envFrom
  "port" $port
  "portName" (ternary "pytorchjob-port" "rendezvous" (eq $target "pytorchjob"))
  "podSecurityContext" $podSC
  "containerSecurityContext" $containerSC
  "volumes" $podVolumes
  "volumeMounts" $mounts
  "affinity" (default dict $V.affinity)
  "priorityClassName" (default "" $V.priorityClassName)
  "serviceAccountName" (default "" $V.serviceAccountName)
  "restartPolicy" $restartPolicy
  "backoffLimit" (int64 $V.backoffLimit)
  "podFailurePolicy" $podFailurePolicy
  "failurePolicy" $failurePolicy
  "gracePeriod" (int64 $V.gracePeriod)
  "restartFromScratch" (and $usesTrainer (not (hasKey $volumes "checkpoints")) (not (has "--checkpoint-dir" $args)))
  "replicas" $replicas
  "elastic" $elastic
  "grouped" $grouped
  "minNodes" $min
  "maxNodes" $max
  "nproc" $nproc
  "maxRestarts" (int64 $rdzv.maxRestarts)
  "serviceName" $name
  "rjob" "node"
  "subdomain" (ternary $name "" (eq $target "job"))
-}}
{{- if not (kindIs "invalid" $V.ttlSecondsAfterFinished) -}}{{- $_ := set $view "ttl" (int64 $V.ttlSecondsAfterFinished) -}}{{- end -}}
{{- if not (kindIs "invalid" $V.activeDeadlineSeconds) -}}{{- $_ := set $view "deadline" (int64 $V.activeDeadlineSeconds) -}}{{- end -}}

{{- /* One view per node group (render._group_view): its object, node count, command, env,
   resources and scheduling fields; the uniform layout is the one group. */ -}}
{{- $groupViews := list -}}
{{- $offset := 0 -}}
{{- range $g := $groups -}}
{{- $gv := deepCopy $view -}}
{{- $genv := deepCopy $env -}}
{{- if $wiredByUs -}}
{{- $_ := set $genv "PET_NPROC_PER_NODE" (toString (int64 $g.nproc)) -}}
{{- if and $grouped (eq $mode "static") -}}{{- $_ := set $genv "PET_NODE_RANK_OFFSET" (toString $offset) -}}{{- end -}}
{{- end -}}
{{- range $key, $value := $userEnv -}}{{- $_ := set $genv $key $value -}}{{- end -}}
{{- $envList := list -}}
{{- if and $wiredByUs (eq $mode "static") (not $grouped) -}}
{{- $envList = append $envList (dict "name" "PET_NODE_RANK" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.annotations['batch.kubernetes.io/job-completion-index']"))) -}}
{{- end -}}
{{- range $key := keys $genv | sortAlpha -}}
{{- $envList = append $envList (dict "name" $key "value" (get $genv $key)) -}}
{{- end -}}
{{- range $key, $ref := $secretEnv -}}
{{- $envList = append $envList (dict "name" $key "valueFrom" (dict "secretKeyRef" (dict "name" $ref.secret "key" $ref.key))) -}}
{{- end -}}
{{- $gcommand := $entrypoint -}}
{{- if and $grouped (eq (index $entrypoint 0) "torchrun") -}}
{{- if $wiredByUs -}}
{{- $gcommand = concat (list "python3" "-c" $launcher) (rest $entrypoint) -}}
{{- else if eq $target "pytorchjob" -}}
{{- $gcommand = concat (list "torchrun" "--nproc-per-node" (toString (int64 $g.nproc))) (rest $entrypoint) -}}
{{- end -}}
{{- else if and $grouped $usesLauncher (eq $target "pytorchjob") -}}
{{- $gcommand = concat $torchrun (list "--nproc-per-node" (toString (int64 $g.nproc))) (slice $entrypoint 3) -}}
{{- end -}}
{{- $gres := $g.resources -}}
{{- $ggpu := default $gpuResource $g.gpuResource -}}
{{- $requests := dict -}}
{{- $limits := dict -}}
{{- $cpu := ternary $gres.cpu $res.cpu (hasKey $gres "cpu") -}}
{{- $memory := ternary $gres.memory $res.memory (hasKey $gres "memory") -}}
{{- if $cpu -}}{{- $_ := set $requests "cpu" $cpu -}}{{- end -}}
{{- if $memory -}}
{{- $_ := set $requests "memory" $memory -}}
{{- $_ := set $limits "memory" $memory -}}
{{- end -}}
{{- if gt (int64 $g.gpus) 0 -}}{{- $_ := set $limits $ggpu (int64 $g.gpus) -}}{{- end -}}
{{- $resources := dict -}}
{{- if $limits -}}{{- $_ := set $resources "limits" $limits -}}{{- end -}}
{{- if $requests -}}{{- $_ := set $resources "requests" $requests -}}{{- end -}}
{{- $tolerations := list -}}
{{- $gpuTolerated := false -}}
{{- range $tol := concat (default list $V.tolerations) $g.tolerations -}}
{{- $tolerations = append $tolerations $tol -}}
{{- if eq (toString (get $tol "key")) $ggpu -}}{{- $gpuTolerated = true -}}{{- end -}}
{{- end -}}
{{- if and (gt (int64 $g.gpus) 0) (not $gpuTolerated) -}}
{{- $tolerations = append $tolerations (dict "key" $ggpu "operator" "Exists" "effect" "NoSchedule") -}}
{{- end -}}
{{- $nodeSelector := merge (deepCopy $g.nodeSelector) (default dict $V.nodeSelector) -}}
{{- if $grouped -}}
{{- $_ := set $gv "labels" (merge (dict "ddpctl.io/node-group" $g.name) $labels) -}}
{{- $_ := set $gv "topLabels" (merge (dict "ddpctl.io/node-group" $g.name) $topLabels) -}}
{{- $_ := set $gv "replicas" (int64 $g.nodes) -}}
{{- end -}}
{{- $_ := set $gv "name" (default $name $g.workload) -}}
{{- $_ := set $gv "rjob" (default "node" $g.rjob) -}}
{{- $_ := set $gv "group" $g.name -}}
{{- $_ := set $gv "nproc" (int64 $g.nproc) -}}
{{- $_ := set $gv "command" $gcommand -}}
{{- $_ := set $gv "env" $envList -}}
{{- $_ := set $gv "resources" $resources -}}
{{- $_ := set $gv "tolerations" $tolerations -}}
{{- $_ := set $gv "nodeSelector" $nodeSelector -}}
{{- /* JobSpec.topology_of: the group's own request, else the spec's */ -}}
{{- $topology := $V.topology -}}
{{- $topologyAt := "topology" -}}
{{- if not (kindIs "invalid" $g.topology) -}}{{- $topology = $g.topology -}}{{- $topologyAt = $g.topologyAt -}}{{- end -}}
{{- $podset := include "ddp-job.topologyAnnotations" (list $topologyAt $topology (int64 $g.nodes) $elastic $target) | fromJson -}}
{{- $_ := set $gv "topologyAnnotations" $podset -}}
{{- $_ := set $gv "podAnnotations" (merge (deepCopy $podset) (default dict $V.annotations)) -}}
{{- $groupViews = append $groupViews $gv -}}
{{- $offset = add $offset (int64 $g.nodes) -}}
{{- end -}}
{{- /* The job-wide view takes the first group's pod fields (TrainJob and the Service use it). */ -}}
{{- $g0 := index $groupViews 0 -}}
{{- range $key := list "labels" "command" "env" "resources" "tolerations" "nodeSelector" "rjob" "nproc" "podAnnotations" -}}
{{- $_ := set $view $key (get $g0 $key) -}}
{{- end -}}
{{- $_ := set $view "groups" $groupViews -}}
{{- /* PyTorchJob: Master = the first group (1 node), Worker = the second, or the rest of the one group. */ -}}
{{- $replicaSpecs := list -}}
{{- if $elastic -}}
{{- $replicaSpecs = list (dict "type" "Worker" "replicas" $replicas "pod" $g0) -}}
{{- else -}}
{{- $replicaSpecs = list (dict "type" "Master" "replicas" 1 "pod" $g0) -}}
{{- if gt (len $groupViews) 1 -}}
{{- $replicaSpecs = append $replicaSpecs (dict "type" "Worker" "replicas" (int64 (index $groups 1).nodes) "pod" (index $groupViews 1)) -}}
{{- else if gt $replicas 1 -}}
{{- $replicaSpecs = append $replicaSpecs (dict "type" "Worker" "replicas" (sub $replicas 1) "pod" $g0) -}}
{{- end -}}
{{- end -}}
{{- /* PyTorchEngine.podset_group: Master and Worker asking for one level are placed as one */ -}}
{{- if eq (len $replicaSpecs) 2 -}}
{{- $m := (index $replicaSpecs 0).pod.topologyAnnotations -}}
{{- $w := (index $replicaSpecs 1).pod.topologyAnnotations -}}
{{- if and (eq (toJson $m) (toJson $w)) (or (hasKey $m "kueue.x-k8s.io/podset-required-topology") (hasKey $m "kueue.x-k8s.io/podset-preferred-topology")) -}}
{{- range $r := $replicaSpecs -}}
{{- $_ := set $r "pod" (merge (dict "podAnnotations" (merge (dict "kueue.x-k8s.io/podset-group-name" $name) $r.pod.podAnnotations)) $r.pod) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $view "replicaSpecs" $replicaSpecs -}}
{{- toJson $view -}}
{{- end -}}

{{/*
ddp-job.topologyAnnotations: Kueue's PodSet annotations for one group's topology request, as JSON
(Topology.annotations), after Topology.check's rules. Context: (list where topology pods elastic target).
*/}}
{{- define "ddp-job.topologyAnnotations" -}}
{{- $where := index . 0 -}}
{{- $t := default dict (index . 1) -}}
{{- $pods := index . 2 -}}
{{- $modes := list -}}
{{- if not (kindIs "invalid" $t.required) -}}{{- $modes = append $modes "required" -}}{{- end -}}
{{- if not (kindIs "invalid" $t.preferred) -}}{{- $modes = append $modes "preferred" -}}{{- end -}}
{{- if $t.unconstrained -}}{{- $modes = append $modes "unconstrained" -}}{{- end -}}
{{- $hasLevel := not (kindIs "invalid" $t.sliceLevel) -}}
{{- $hasSize := not (kindIs "invalid" $t.sliceSize) -}}
{{- if and $hasLevel (eq (index . 4) "pytorchjob") -}}
{{- include "ddp-job.fail" (list (printf "%s.sliceLevel" $where) "a PyTorchJob's Master (1 pod) and Worker are two Kueue PodSets, which slices cannot span" "use target job, jobset or trainjob for slices, or drop sliceLevel and sliceSize") -}}
{{- end -}}
{{- if gt (len $modes) 1 -}}
{{- include "ddp-job.fail" (list $where (printf "sets both %s and %s" (index $modes 0) (index $modes 1)) "keep one of required, preferred and unconstrained") -}}
{{- end -}}
{{- if and $hasLevel (not $hasSize) -}}
{{- include "ddp-job.fail" (list (printf "%s.sliceSize" $where) "is missing (with sliceLevel)" "give sliceLevel and sliceSize together") -}}
{{- end -}}
{{- if and $hasSize (not $hasLevel) -}}
{{- include "ddp-job.fail" (list (printf "%s.sliceLevel" $where) "is missing (with sliceSize)" "give sliceLevel and sliceSize together") -}}
{{- end -}}
{{- $out := dict -}}
{{- if $hasSize -}}
{{- $size := int64 $t.sliceSize -}}
{{- if index . 3 -}}
{{- include "ddp-job.fail" (list (printf "%s.sliceSize" $where) "an elastic job's node count changes, so slices cannot divide it" "give a fixed node count, or drop the slice") -}}
{{- end -}}
{{- if ne (mod $pods $size) 0 -}}
{{- $divisors := list -}}
{{- range $d := until (int $pods) -}}{{- if eq (mod $pods (add1 $d)) 0 -}}{{- $divisors = append $divisors (toString (add1 $d)) -}}{{- end -}}{{- end -}}
{{- include "ddp-job.fail" (list (printf "%s.sliceSize" $where) (printf "%d does not divide the group's %d nodes" $size $pods) (printf "use a divisor of %d: %s" $pods (join ", " $divisors))) -}}
{{- end -}}
{{- $_ := set $out "kueue.x-k8s.io/podset-slice-required-topology" $t.sliceLevel -}}
{{- $_ := set $out "kueue.x-k8s.io/podset-slice-size" (toString $size) -}}
{{- end -}}
{{- if not (kindIs "invalid" $t.required) -}}
{{- $_ := set $out "kueue.x-k8s.io/podset-required-topology" $t.required -}}
{{- else if not (kindIs "invalid" $t.preferred) -}}
{{- $_ := set $out "kueue.x-k8s.io/podset-preferred-topology" $t.preferred -}}
{{- else if $t.unconstrained -}}
{{- $_ := set $out "kueue.x-k8s.io/podset-unconstrained-topology" "true" -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* ddp-job.metadata: an object's metadata (name, namespace, labels with the queue, annotations). */}}
{{- define "ddp-job.metadata" -}}
metadata:
  name: {{ include "ddp-job.json" .name }}
  namespace: {{ include "ddp-job.json" .namespace }}
  labels: {{ include "ddp-job.json" .topLabels }}
{{- if .annotations }}
  annotations: {{ include "ddp-job.json" .annotations }}
{{- end }}
{{- end -}}

{{/* ddp-job.container: the training container (render's `container` macro). */}}
{{- define "ddp-job.container" -}}
name: {{ include "ddp-job.json" .containerName }}
image: {{ include "ddp-job.json" .image }}
imagePullPolicy: {{ include "ddp-job.json" .pullPolicy }}
command: {{ include "ddp-job.jsonList" .command }}
args: {{ include "ddp-job.jsonList" .args }}
env: {{ include "ddp-job.jsonList" .env }}
{{- if .envFrom }}
envFrom: {{ include "ddp-job.json" .envFrom }}
{{- end }}
ports: {{ include "ddp-job.json" (list (dict "name" .portName "containerPort" .port "protocol" "TCP")) }}
resources: {{ include "ddp-job.json" .resources }}
securityContext: {{ include "ddp-job.json" .containerSecurityContext }}
volumeMounts: {{ include "ddp-job.jsonList" .volumeMounts }}
{{- end -}}

{{/* ddp-job.podSpecFields: pod-level fields shared by every target (also TrainJob's runtime patch). */}}
{{- define "ddp-job.podSpecFields" -}}
securityContext: {{ include "ddp-job.json" .podSecurityContext }}
terminationGracePeriodSeconds: {{ .gracePeriod }}
{{- if .serviceAccountName }}
serviceAccountName: {{ include "ddp-job.json" .serviceAccountName }}
{{- end }}
{{- if .imagePullSecrets }}
imagePullSecrets: {{ include "ddp-job.json" .imagePullSecrets }}
{{- end }}
{{- if .nodeSelector }}
nodeSelector: {{ include "ddp-job.json" .nodeSelector }}
{{- end }}
{{- if .tolerations }}
tolerations: {{ include "ddp-job.json" .tolerations }}
{{- end }}
{{- if .affinity }}
affinity: {{ include "ddp-job.json" .affinity }}
{{- end }}
volumes: {{ include "ddp-job.jsonList" .volumes }}
{{- end -}}

{{/*
ddp-job.podTemplate: a pod template (metadata + spec). Context: (dict "v" $view "restartPolicy" bool);
PyTorchJob sets restartPolicy per replica instead of in the pod.
*/}}
{{- define "ddp-job.podTemplate" -}}
{{- $v := .v -}}
metadata:
  labels: {{ include "ddp-job.json" $v.labels }}
{{- if $v.podAnnotations }}
  annotations: {{ include "ddp-job.json" $v.podAnnotations }}
{{- end }}
spec:
{{- if .restartPolicy }}
  restartPolicy: {{ include "ddp-job.json" $v.restartPolicy }}
{{- end }}
{{- if $v.subdomain }}
  subdomain: {{ include "ddp-job.json" $v.subdomain }}
{{- end }}
{{- if $v.priorityClassName }}
  priorityClassName: {{ include "ddp-job.json" $v.priorityClassName }}
{{- end }}
  {{- include "ddp-job.podSpecFields" $v | nindent 2 }}
  containers:
  -{{- include "ddp-job.container" $v | nindent 4 }}
{{- end -}}
