{{/*
Helpers of the ddp-job chart: they compute what `ddpctl render` computes in Python (the spec's
Plan and render.view()), so the chart renders the same objects. What Python knows -- limits,
defaults, error messages, labels, env, and per engine its names, wiring, failure rules and what it
refuses -- comes from _generated.tpl (tools/chart_contract.py reads it off the code); these
helpers hold only the logic that applies it to the values. `ddp-job.view` computes every derived
value once, as a dict (returned as JSON); the templates only lay it out. Every value reaches the
YAML through `ddp-job.json`, so no string a user gives (quotes, newlines, `{{`, `: `) can change a
document's structure.
*/}}

{{/*
ddp-job.json: any value as one JSON (= YAML flow) node. Go's JSON encoder escapes control
characters below U+0020 and U+2028/U+2029 but not U+007F-U+009F, U+FFFE and U+FFFF, which YAML
parsers refuse (or read as line breaks), so those are escaped here too.
*/}}
{{- define "ddp-job.json" -}}
{{- $out := toJson . -}}
{{- range $code := concat (untilStep 127 160 1) (list 65534 65535) -}}
{{- $out = replace (printf "%c" $code) (printf "\\u%04x" $code) $out -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/* ddp-job.jsonList: a list as JSON, `[]` when empty (sprig's empty `list` is a nil slice: `null`). */}}
{{- define "ddp-job.jsonList" -}}
{{- if . -}}{{- include "ddp-job.json" . -}}{{- else -}}[]{{- end -}}
{{- end -}}

{{/* ddp-job.format: a generated text with its `%(arg)` placeholders filled. Context: (list text args). */}}
{{- define "ddp-job.format" -}}
{{- $text := index . 0 -}}
{{- $args := index . 1 -}}
{{- $parts := regexSplit "%\\(\\w+\\)" $text -1 -}}
{{- $out := index $parts 0 -}}
{{- range $i, $ref := regexFindAll "%\\(\\w+\\)" $text -1 -}}
{{- $arg := trimSuffix ")" (trimPrefix "%(" $ref) -}}
{{- if not (hasKey $args $arg) -}}{{- fail (printf "ddp-job.format: no %s for %q" $arg $text) -}}{{- end -}}
{{- $out = print $out (get $args $arg) (index $parts (add1 $i)) -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/* ddp-job.fill: a generated JSON value with every text formatted, as {"v": value}. Context: (list value args). */}}
{{- define "ddp-job.fill" -}}
{{- $value := index . 0 -}}
{{- $args := index . 1 -}}
{{- if kindIs "string" $value -}}
{{- $value = include "ddp-job.format" (list $value $args) -}}
{{- else if kindIs "map" $value -}}
{{- $out := dict -}}
{{- range $k, $item := $value -}}{{- $_ := set $out $k (include "ddp-job.fill" (list $item $args) | fromJson).v -}}{{- end -}}
{{- $value = $out -}}
{{- else if kindIs "slice" $value -}}
{{- $out := list -}}
{{- range $item := $value -}}{{- $out = append $out (include "ddp-job.fill" (list $item $args) | fromJson).v -}}{{- end -}}
{{- $value = $out -}}
{{- end -}}
{{- toJson (dict "v" $value) -}}
{{- end -}}

{{/* ddp-job.fail: stop rendering with "<field>: <problem>; <fix>", ddpctl's SpecError. Context: (list message args). */}}
{{- define "ddp-job.fail" -}}
{{- $m := (include "ddp-job.fill" . | fromJson).v -}}
{{- fail (printf "%s: %s%s" $m.field $m.problem (ternary (printf "; %s" $m.fix) "" (ne $m.fix ""))) -}}
{{- end -}}

{{/* ddp-job.envValue: env values are strings; a YAML number is kept as written (4 -> "4", 0.5 -> "0.5";
JSON's digits are Python's from 1e-4 to 1e16). */}}
{{- define "ddp-job.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else if kindIs "float64" . -}}
{{- toJson . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
ddp-job.view: every derived value, as JSON (use `include "ddp-job.view" . | fromJson`). The
rules JSON Schema cannot express fail here, in ddpctl's order: the spec's own (JobSpec), then
what the engine cannot run (Engine.check), then the length of the names it derives.
*/}}
{{- define "ddp-job.view" -}}
{{- $V := .Values -}}
{{- $G := include "ddp-job.generated" . | fromJson -}}
{{- $C := $G.constants -}}
{{- $M := $G.messages -}}
{{- $E := index $G.engines $V.target -}}
{{- $R := $E.recovery -}}
{{- /* recovery: pod asked, or auto (Engine.layout): pod until a rule below blocks it (the target's first) */ -}}
{{- $recoveryAsked := toString $V.recovery -}}
{{- $recovery := and (ne $recoveryAsked "gang") (not (empty $R)) -}}
{{- $name := $V.name -}}
{{- $maxNodes := int64 $C.maxNodes -}}
{{- if and $V.workspace $V.workspace.dir -}}
{{- fail "workspace: the chart ships no code from a folder (GitOps keeps what runs in Git); build your code into the image with `ddpctl build`, set image to its tag, and remove workspace" -}}
{{- end -}}

{{- /* The layout (JobSpec.groups): node groups, or the uniform layout as its one group. */ -}}
{{- $grouped := not (empty $V.nodeGroups) -}}
{{- $elastic := false -}}
{{- $min := 0 -}}
{{- $max := 0 -}}
{{- $groups := list -}}
{{- if $grouped -}}
{{- $set := list -}}
{{- range $d := $C.layoutDefaults -}}
{{- if ne (toJson (index $V $d.key)) (toJson $d.default) -}}{{- $set = append $set $d.key -}}{{- end -}}
{{- end -}}
{{- if $set -}}{{- include "ddp-job.fail" (list $M.groupsWithLayout (dict "keys" (join ", " $set))) -}}{{- end -}}
{{- $seen := dict -}}
{{- $firstGpus := int64 (index $V.nodeGroups 0).gpusPerNode -}}
{{- range $i, $g := $V.nodeGroups -}}
{{- $at := dict "where" (printf "nodeGroups[%d]" $i) -}}
{{- if hasKey $seen $g.name -}}{{- include "ddp-job.fail" (list $M.groupName (merge (dict "name" $g.name) $at)) -}}{{- end -}}
{{- $_ := set $seen $g.name true -}}
{{- $gpus := int64 $g.gpusPerNode -}}
{{- $nproc := ternary $gpus (int64 $C.cpuProcsPerNode) (gt $gpus 0) -}}
{{- if not (kindIs "invalid" $g.procsPerNode) -}}
{{- $nproc = int64 $g.procsPerNode -}}
{{- if and (gt $gpus 0) (gt $nproc $gpus) -}}{{- include "ddp-job.fail" (list $M.groupProcs (merge (dict "procs" $nproc "gpus" $gpus) $at)) -}}{{- end -}}
{{- end -}}
{{- if ne (gt $gpus 0) (gt $firstGpus 0) -}}{{- include "ddp-job.fail" (list $M.groupGpus (merge (dict "gpus" $gpus "first" $firstGpus) $at)) -}}{{- end -}}
{{- $groups = append $groups (dict "name" $g.name "nodes" (int64 $g.nodes) "gpus" $gpus "nproc" $nproc "nodeSelector" (default dict $g.nodeSelector) "tolerations" (default list $g.tolerations) "resources" (default dict $g.resources) "gpuResource" (default "" $g.gpuResource) "topology" $g.topology "topologyAt" (printf "%s.topology" $at.where)) -}}
{{- end -}}
{{- $total := 0 -}}
{{- range $g := $groups -}}{{- $total = add $total $g.nodes -}}{{- end -}}
{{- if gt $total $maxNodes -}}{{- include "ddp-job.fail" (list $M.groupsNodes (dict "total" $total)) -}}{{- end -}}
{{- else -}}
{{- $nodes := 0 -}}
{{- $text := trim (toString $V.nodes) -}}
{{- if contains ":" $text -}}
{{- $elastic = true -}}
{{- $min = int64 (atoi (index (splitList ":" $text) 0)) -}}
{{- $max = int64 (atoi (index (splitList ":" $text) 1)) -}}
{{- $nodes = $max -}}
{{- if gt $min $max -}}{{- include "ddp-job.fail" (list $M.nodesRange (dict "min" $min "max" $max)) -}}{{- end -}}
{{- if gt $max $maxNodes -}}{{- include "ddp-job.fail" (list $M.nodesMax (dict "max" $max)) -}}{{- end -}}
{{- else -}}
{{- $nodes = int64 (ternary (atoi $text) $V.nodes (kindIs "string" $V.nodes)) -}}
{{- if gt $nodes $maxNodes -}}{{- include "ddp-job.fail" (list $M.nodes (dict "nodes" $nodes)) -}}{{- end -}}
{{- end -}}
{{- $gpus := int64 $V.gpusPerNode -}}
{{- $nproc := ternary $gpus (int64 $C.cpuProcsPerNode) (gt $gpus 0) -}}
{{- if not (kindIs "invalid" $V.procsPerNode) -}}
{{- $nproc = int64 $V.procsPerNode -}}
{{- if and (gt $gpus 0) (gt $nproc $gpus) -}}{{- include "ddp-job.fail" (list $M.procs (dict "procs" $nproc "gpus" $gpus)) -}}{{- end -}}
{{- end -}}
{{- $groups = list (dict "name" $C.uniformGroup "nodes" $nodes "gpus" $gpus "nproc" $nproc "nodeSelector" dict "tolerations" list "resources" dict "gpuResource" "" "topology" nil "topologyAt" "topology") -}}
{{- end -}}
{{- $replicas := 0 -}}
{{- $gpus := 0 -}}
{{- range $g := $groups -}}
{{- $replicas = add $replicas $g.nodes -}}
{{- if gt $g.gpus $gpus -}}{{- $gpus = $g.gpus -}}{{- end -}}
{{- end -}}
{{- $layout := ternary "grouped" (ternary "elastic" "fixed" $elastic) $grouped -}}

{{- /* What each pod runs (JobSpec._validate_entrypoint, Plan.entrypoint): a file that gives a script or
   command leaves out the default module, which the chart cannot tell from one given. */ -}}
{{- $module := default "" $V.module -}}
{{- $command := default list $V.command -}}
{{- if and (or $V.script $command) (eq $module $C.trainerModule) -}}{{- $module = "" -}}{{- end -}}
{{- $chosen := list -}}
{{- if $module -}}{{- $chosen = append $chosen "module" -}}{{- end -}}
{{- if $V.script -}}{{- $chosen = append $chosen "script" -}}{{- end -}}
{{- if $command -}}{{- $chosen = append $chosen "command" -}}{{- end -}}
{{- if ne (len $chosen) 1 -}}{{- include "ddp-job.fail" (list $M.entrypoint (dict "chosen" (default "none" (join ", " $chosen)))) -}}{{- end -}}
{{- $usesTrainer := eq $module $C.trainerModule -}}
{{- $usesLauncher := and $usesTrainer (not $command) -}}
{{- $code := ternary "builtin" "custom" $usesTrainer -}}

{{- if and (eq $V.backend "nccl") (eq $gpus 0) -}}{{- include "ddp-job.fail" (list $M.backend dict) -}}{{- end -}}
{{- $volumes := default dict $V.volumes -}}
{{- $secretEnv := default dict $V.secretEnv -}}
{{- $clash := list -}}
{{- range $key, $value := default dict $V.env -}}{{- if hasKey $secretEnv $key -}}{{- $clash = append $clash $key -}}{{- end -}}{{- end -}}
{{- if $clash -}}{{- include "ddp-job.fail" (list $M.secretEnv (dict "names" (join ", " (sortAlpha $clash)))) -}}{{- end -}}
{{- $mountPaths := dict -}}
{{- range $vname, $vol := $volumes -}}
{{- if hasKey $mountPaths $vol.mountPath -}}
{{- include "ddp-job.fail" (list $M.mountPath (dict "volume" $vname "path" $vol.mountPath "other" (get $mountPaths $vol.mountPath))) -}}
{{- end -}}
{{- $_ := set $mountPaths $vol.mountPath $vname -}}
{{- end -}}

{{- /* Checkpoints in an object store (JobSpec._validate_checkpoints; the URL's own form is the schema's). */ -}}
{{- $checkpointFlag := "" -}}
{{- range $dir := $C.trainerDirs -}}{{- if eq $dir.volume "checkpoints" -}}{{- $checkpointFlag = $dir.flag -}}{{- end -}}{{- end -}}
{{- if $V.checkpoints -}}
{{- if not $usesTrainer -}}{{- include "ddp-job.fail" (list $M.checkpointsTrainer dict) -}}{{- end -}}
{{- if hasKey $volumes "checkpoints" -}}{{- include "ddp-job.fail" (list $M.checkpointsVolume dict) -}}{{- end -}}
{{- range $arg := default list $V.args -}}
{{- if or (eq $arg $checkpointFlag) (hasPrefix (print $checkpointFlag "=") $arg) -}}{{- include "ddp-job.fail" (list $M.checkpointsArgs dict) -}}{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Kueue topology requests (Topology.check, Topology.annotations): the group's own, else the spec's. */ -}}
{{- $T := $G.pod.topology -}}
{{- range $g := $groups -}}
{{- $t := $V.topology -}}
{{- $where := "topology" -}}
{{- if not (kindIs "invalid" $g.topology) -}}{{- $t = $g.topology -}}{{- $where = $g.topologyAt -}}{{- end -}}
{{- $t = default dict $t -}}
{{- $at := dict "where" $where -}}
{{- $modes := list -}}
{{- range $mode := list "required" "preferred" -}}{{- if not (kindIs "invalid" (index $t $mode)) -}}{{- $modes = append $modes $mode -}}{{- end -}}{{- end -}}
{{- if $t.unconstrained -}}{{- $modes = append $modes "unconstrained" -}}{{- end -}}
{{- if gt (len $modes) 1 -}}{{- include "ddp-job.fail" (list $M.topologyModes (merge (dict "first" (index $modes 0) "second" (index $modes 1)) $at)) -}}{{- end -}}
{{- $hasLevel := not (kindIs "invalid" $t.sliceLevel) -}}
{{- $hasSize := not (kindIs "invalid" $t.sliceSize) -}}
{{- if and $hasLevel (not $hasSize) -}}{{- include "ddp-job.fail" (list $M.sliceSizeMissing $at) -}}{{- end -}}
{{- if and $hasSize (not $hasLevel) -}}{{- include "ddp-job.fail" (list $M.sliceLevelMissing $at) -}}{{- end -}}
{{- $annotations := dict -}}
{{- if $hasSize -}}
{{- $size := int64 $t.sliceSize -}}
{{- if $elastic -}}{{- include "ddp-job.fail" (list $M.sliceElastic $at) -}}{{- end -}}
{{- if mod $g.nodes $size -}}
{{- $divisors := list -}}
{{- range $d := untilStep 1 (int (add1 $g.nodes)) 1 -}}{{- if not (mod $g.nodes $d) -}}{{- $divisors = append $divisors (toString $d) -}}{{- end -}}{{- end -}}
{{- include "ddp-job.fail" (list $M.sliceDivides (merge (dict "size" $size "pods" $g.nodes "divisors" (join ", " $divisors)) $at)) -}}
{{- end -}}
{{- $annotations = (include "ddp-job.fill" (list $T.slices (dict "level" $t.sliceLevel "size" $size)) | fromJson).v -}}
{{- end -}}
{{- $level := "" -}}
{{- range $mode := list "unconstrained" "preferred" "required" -}}{{- if index $t $mode -}}{{- $level = $mode -}}{{- end -}}{{- end -}}
{{- if $level -}}
{{- $annotations = merge $annotations (include "ddp-job.fill" (list (get $T $level) (dict "level" (index $t $level))) | fromJson).v -}}
{{- end -}}
{{- $_ := set $g "topologyAnnotations" $annotations -}}
{{- $_ := set $g "topologyLevel" (has $level (list "required" "preferred")) -}}
{{- $_ := set $g "sliced" (not (empty $t.sliceLevel)) -}}
{{- $_ := set $g "where" $where -}}
{{- end -}}

{{- /* The trainer's timeouts (JobSpec._validate): the stall watchdog must fire before a collective times out. */ -}}
{{- $stall := ternary (int64 $C.stallTimeout) $V.stallTimeout (kindIs "invalid" $V.stallTimeout) | int64 -}}
{{- if and $usesTrainer (not (kindIs "invalid" $V.collectiveTimeout)) -}}
{{- if and (ne $stall 0) (ge $stall (int64 $V.collectiveTimeout)) -}}
{{- include "ddp-job.fail" (list $M.collectiveTimeout (dict "collective" (int64 $V.collectiveTimeout) "stall" $stall)) -}}
{{- end -}}
{{- else if and $usesTrainer $V.stallTimeout (ge $stall (int64 $C.collectiveTimeout)) -}}
{{- include "ddp-job.fail" (list $M.stallTimeout (dict "stall" $stall)) -}}
{{- end -}}

{{- /* The preflight, the fabric and avoidNodes (JobSpec's rules preflight, fabric, avoid_nodes). */ -}}
{{- $P := $C.preflight -}}
{{- $pf := mergeOverwrite (deepCopy $P.defaults) (default dict $V.preflight) -}}
{{- $checks := ne (toString $pf.mode) "off" -}}
{{- if and $checks (not $usesTrainer) -}}{{- include "ddp-job.fail" (list $M.preflightTrainer (dict "mode" $pf.mode)) -}}{{- end -}}
{{- /* The straggler detector (Plan.stragglers_env): its mode always, its settings when on. */ -}}
{{- $S := $C.stragglers -}}
{{- $sg := mergeOverwrite (deepCopy $S.defaults) (default dict $V.stragglers) -}}
{{- if and (eq (toString $sg.mode) "replace") (eq $recoveryAsked "gang") -}}{{- include "ddp-job.fail" (list $M.stragglersReplace dict) -}}{{- end -}}
{{- $watch := ne (toString $sg.mode) "off" -}}
{{- $fabric := default "socket" $V.fabric -}}
{{- $F := get $C.fabrics $fabric -}}
{{- if ne $fabric "socket" -}}
{{- if not (or (eq $V.backend "nccl") (and (eq $V.backend "auto") (gt $gpus 0))) -}}
{{- include "ddp-job.fail" (list $M.fabricGloo (dict "fabric" $fabric "backend" $V.backend "gpus" $gpus)) -}}
{{- end -}}
{{- if and $F.capabilities (ne $V.podSecurity "privileged") -}}
{{- include "ddp-job.fail" (list $M.fabricPrivileged (dict "fabric" $fabric "podSecurity" $V.podSecurity)) -}}
{{- end -}}
{{- end -}}
{{- $avoid := default list $V.avoidNodes -}}
{{- $affinity := deepCopy (default dict $V.affinity) -}}
{{- $required := "requiredDuringSchedulingIgnoredDuringExecution" -}}
{{- if $avoid -}}
{{- $fits := true -}}
{{- if hasKey $affinity "nodeAffinity" -}}
{{- $na := index $affinity "nodeAffinity" -}}
{{- if not (kindIs "map" $na) -}}{{- $fits = false -}}
{{- else if hasKey $na $required -}}
{{- $req := index $na $required -}}
{{- $terms := list -}}
{{- if kindIs "map" $req -}}{{- $terms = index $req "nodeSelectorTerms" -}}{{- end -}}
{{- if or (not (kindIs "slice" $terms)) (empty $terms) -}}{{- $fits = false -}}
{{- else -}}
{{- range $t := $terms -}}
{{- if not (kindIs "map" $t) -}}{{- $fits = false -}}
{{- else if and (hasKey $t "matchFields") (not (kindIs "slice" (index $t "matchFields"))) -}}{{- $fits = false -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $fits -}}{{- include "ddp-job.fail" (list $M.avoidNodesAffinity dict) -}}{{- end -}}
{{- /* Plan.affinity: a required node anti-affinity on the nodes' names, in every required term. */ -}}
{{- $na := default dict (index $affinity "nodeAffinity") -}}
{{- if not (hasKey $na $required) -}}{{- $_ := set $na $required (dict "nodeSelectorTerms" (list dict)) -}}{{- end -}}
{{- $req := index $na $required -}}
{{- $avoidField := dict "key" "metadata.name" "operator" "NotIn" "values" $avoid -}}
{{- $newTerms := list -}}
{{- range $t := $req.nodeSelectorTerms -}}
{{- $newTerms = append $newTerms (merge (dict "matchFields" (append (default list (index $t "matchFields")) $avoidField)) $t) -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $newTerms -}}
{{- $_ := set $affinity "nodeAffinity" $na -}}
{{- end -}}

{{- /* What the engine cannot run (Engine.check, Engine.check_recovery), in its order. */ -}}
{{- $backend := $V.backend -}}
{{- if eq $backend "auto" -}}{{- $backend = get $C.backend (ternary "gpus" "cpu" (gt $gpus 0)) -}}{{- end -}}
{{- $strategy := "" -}}
{{- if $R -}}
{{- $strategy = toString (get (default dict $V.env) $R.strategyEnv) -}}
{{- $argList := default list $V.args -}}
{{- range $i, $arg := $argList -}}
{{- if and (eq (toString $arg) "--strategy") (lt (add1 $i) (len $argList)) -}}{{- $strategy = toString (index $argList (add1 $i)) -}}
{{- else if hasPrefix "--strategy=" (toString $arg) -}}{{- $strategy = trimPrefix "--strategy=" (toString $arg) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $coordinatorGroup := false -}}
{{- range $g := $groups -}}{{- if and $R (eq $g.name $R.groupName) -}}{{- $coordinatorGroup = true -}}{{- end -}}{{- end -}}
{{- $mode := $V.rendezvous.mode -}}
{{- if eq $mode "auto" -}}{{- $mode = get $C.rendezvous (ternary "elastic" "fixed" $elastic) -}}{{- end -}}
{{- $restartPolicy := $V.restartPolicy -}}
{{- $shape := "one" -}}
{{- if eq (len $groups) 2 -}}{{- $shape = ternary "pairSingleFirst" "pair" (eq (index $groups 0).nodes 1) -}}{{- end -}}
{{- if gt (len $groups) 2 -}}{{- $shape = "more" -}}{{- end -}}
{{- range $rule := $E.refuses -}}
{{- $asked := false -}}
{{- $args := dict -}}
{{- if eq $rule.rule "exitCode" -}}{{- $asked = eq (toString $restartPolicy) "ExitCode" -}}
{{- else if eq $rule.rule "elastic" -}}{{- $asked = $elastic -}}
{{- else if eq $rule.rule "groups" -}}{{- $asked = and $grouped (has $shape $rule.shapes) -}}
{{- else if eq $rule.rule "c10dGroups" -}}{{- $asked = and $grouped (ne $mode "static") -}}
{{- else if eq $rule.rule "slices" -}}
{{- range $g := $groups -}}
{{- if and (not $asked) $g.sliced -}}{{- $asked = true -}}{{- $args = dict "where" $g.where -}}{{- end -}}
{{- end -}}
{{- else if has $rule.rule (list "priorityClassName" "envFromSecrets") -}}{{- $asked = not (empty (index $V $rule.rule)) -}}
{{- else if eq $rule.rule "recoveryTarget" -}}{{- $asked = true -}}
{{- else if eq $rule.rule "recoveryOnFailure" -}}{{- $asked = eq (toString $restartPolicy) "OnFailure" -}}
{{- else if eq $rule.rule "recoveryGroupName" -}}{{- $asked = $coordinatorGroup -}}
{{- else if eq $rule.rule "recoveryCustom" -}}{{- $asked = not $usesLauncher -}}
{{- else if eq $rule.rule "recoveryElastic" -}}{{- $asked = $elastic -}}
{{- else if eq $rule.rule "recoveryBackend" -}}{{- $asked = ne $backend "gloo" -}}
{{- else if eq $rule.rule "recoveryStrategy" -}}{{- $asked = not (has $strategy (list "" "ddp")) -}}
{{- else -}}{{- fail (printf "ddp-job: the engine refuses %q, which _helpers.tpl does not know" $rule.rule) -}}
{{- end -}}
{{- if hasPrefix "recovery" $rule.rule -}}{{- /* blocks recovery: pod; refused only where asked for by name */ -}}
{{- if $asked -}}{{- $recovery = false -}}{{- end -}}
{{- $asked = and $asked (eq $recoveryAsked "pod") -}}
{{- end -}}
{{- if $asked -}}{{- include "ddp-job.fail" (list $rule $args) -}}{{- end -}}
{{- end -}}
{{- if and (eq (toString $sg.mode) "replace") (not $recovery) -}}{{- include "ddp-job.fail" (list $M.stragglersGang dict) -}}{{- end -}}

{{- /* The names the engine derives (Plan.check_names): each group's first and last pod's hostname. */ -}}
{{- $L := index $E.layouts $layout -}}
{{- $longest := "" -}}
{{- $offset := 0 -}}
{{- $rankOffset := 0 -}}
{{- range $g := $groups -}}
{{- $_ := set $g "offset" $offset -}}
{{- range $index := uniq (list 0 (sub $g.nodes 1)) -}}
{{- $rank := add $offset $index -}}
{{- $host := include "ddp-job.format" (list (ternary $L.hostFirst $L.hostOther (eq $rank 0)) (dict "name" $name "group" $g.name "index" $index "rank" $rank "prevRank" (sub $rank 1))) -}}
{{- if gt (len $host) (len $longest) -}}{{- $longest = $host -}}{{- end -}}
{{- end -}}
{{- $_ := set $g "rankOffset" $rankOffset -}}
{{- $offset = add $offset $g.nodes -}}
{{- $rankOffset = add $rankOffset (mul $g.nodes $g.nproc) -}}
{{- end -}}
{{- $worldSize := $rankOffset -}}
{{- if $recovery -}}
{{- $host := include "ddp-job.format" (list $R.coordinator.longestName (dict "name" $name)) -}}
{{- if gt (len $host) (len $longest) -}}{{- $longest = $host -}}{{- end -}}
{{- end -}}
{{- if gt (len $longest) (int $C.maxDnsLabel) -}}
{{- include "ddp-job.fail" (list $E.nameTooLong (dict "name" $name "longest" $longest "length" (len $longest) "limit" (sub (int $C.maxDnsLabel) (sub (len $longest) (len $name))))) -}}
{{- end -}}

{{- /* Wiring (Plan, Engine.torchrun_env, Plan.container_env): the job-wide part. */ -}}
{{- $port := int64 (default $V.rendezvous.port $E.fixedPort) -}}
{{- $first := index $groups 0 -}}
{{- $rank0 := include "ddp-job.format" (list $L.rank0 (dict "name" $name "group" $first.name)) -}}
{{- $W := index $L.wiring $mode -}}
{{- $rdzv := $V.rendezvous -}}
{{- $wiringArgs := dict "name" $name "nodes" $replicas "min" $min "max" $max "rank0" $rank0 "port" $port "join" (int64 $rdzv.joinTimeout) "lastCall" (int64 $rdzv.lastCallTimeout) "maxRestarts" (int64 $rdzv.maxRestarts) -}}
{{- $features := dict "stall" (not (kindIs "invalid" $V.stallTimeout)) "gpus" (gt $gpus 0) "checkpoints" (hasKey $volumes "checkpoints") "collective" (not (kindIs "invalid" $V.collectiveTimeout)) -}}
{{- $envArgs := dict "name" $name "backend" $backend "shutdown" (sub (int64 $V.gracePeriod) (int64 $C.graceMargin)) "stall" $stall -}}
{{- if $features.collective -}}{{- $_ := set $envArgs "collective" (int64 $V.collectiveTimeout) -}}{{- end -}}
{{- if $features.checkpoints -}}{{- $_ := set $envArgs "checkpointMount" (regexReplaceAll "/+$" (get $volumes "checkpoints").mountPath "") -}}{{- end -}}
{{- $env := dict -}}
{{- range $e := index $G.pod.env $code -}}
{{- $on := true -}}
{{- range $f := $e.when -}}{{- $on = and $on (get $features $f) -}}{{- end -}}
{{- if $on -}}{{- $_ := set $env $e.name (include "ddp-job.format" (list $e.value $envArgs)) -}}{{- end -}}
{{- end -}}
{{- range $key, $value := $F.env -}}{{- $_ := set $env $key $value -}}{{- end -}}
{{- if $checks -}}
{{- range $key, $name := $P.env -}}
{{- $value := index $pf $key -}}
{{- if or (has $key (list "mode" "tolerance")) $value -}}{{- $_ := set $env $name (include "ddp-job.envValue" $value) -}}{{- end -}}
{{- end -}}
{{- if ne $fabric "socket" -}}{{- $_ := set $env $P.fabricEnv $fabric -}}{{- end -}}
{{- end -}}
{{- range $key, $name := $S.env -}}
{{- if or $watch (eq $key "mode") -}}{{- $_ := set $env $name (include "ddp-job.envValue" (index $sg $key)) -}}{{- end -}}
{{- end -}}
{{- $userEnv := dict -}}
{{- range $key, $value := default dict $V.env -}}{{- $_ := set $userEnv $key (include "ddp-job.envValue" $value) -}}{{- end -}}

{{- /* What the container runs (Plan.entrypoint, Plan.trainer_args). */ -}}
{{- $launcher := get $C.launcher (ternary "builtin" "custom" $usesLauncher) -}}
{{- $entrypoint := $command -}}
{{- if $V.script -}}{{- $entrypoint = concat $launcher (list $V.script) -}}{{- end -}}
{{- if $module -}}{{- $entrypoint = concat $launcher (list "-m" $module) -}}{{- end -}}
{{- $args := default list $V.args -}}
{{- $extra := list -}}
{{- if and $usesTrainer $V.checkpoints -}}{{- $extra = list $checkpointFlag $V.checkpoints -}}{{- end -}}
{{- range $dir := $C.trainerDirs -}}
{{- if and $usesTrainer (hasKey $volumes $dir.volume) (not (has $dir.flag $args)) -}}
{{- $extra = concat $extra (list $dir.flag (get $volumes $dir.volume).mountPath) -}}
{{- end -}}
{{- end -}}
{{- $commandKind := "" -}}
{{- if $usesLauncher -}}{{- $commandKind = "builtin" -}}
{{- else if and (ge (len $entrypoint) (len $launcher)) (eq (toJson (slice $entrypoint 0 (len $launcher))) (toJson $launcher)) -}}{{- $commandKind = "custom" -}}
{{- end -}}
{{- $rewrite := and $grouped (get $E.groupCommand $commandKind) -}}

{{- /* Pod parts (render.view): security, volumes, labels, failure rules. */ -}}
{{- $security := get $G.pod.security $V.podSecurity -}}
{{- $containerSecurity := deepCopy $security.container -}}
{{- if and $F.capabilities (eq $V.podSecurity "privileged") -}}{{- $_ := set $containerSecurity "capabilities" (dict "add" $F.capabilities) -}}{{- end -}}
{{- $podVolumes := list (include "ddp-job.fill" (list $G.pod.shm.volumes (dict "size" $V.shmSize)) | fromJson).v -}}
{{- $mounts := list $G.pod.shm.volume_mounts -}}
{{- range $vname, $vol := $volumes -}}
{{- $readOnly := default false $vol.readOnly -}}
{{- $podVolumes = append $podVolumes (dict "name" $vname "persistentVolumeClaim" (dict "claimName" $vol.claimName "readOnly" $readOnly)) -}}
{{- $mounts = append $mounts (dict "name" $vname "mountPath" $vol.mountPath "readOnly" $readOnly) -}}
{{- end -}}
{{- $labels := mergeOverwrite (deepCopy (default dict $V.labels)) (include "ddp-job.fill" (list $G.pod.labels (dict "name" $name)) | fromJson).v -}}
{{- $topLabels := deepCopy $labels -}}
{{- if $V.queue -}}{{- $topLabels = mergeOverwrite $topLabels (include "ddp-job.fill" (list $G.pod.queueLabels (dict "queue" $V.queue)) | fromJson).v -}}{{- end -}}
{{- if $V.workloadPriorityClass -}}{{- $topLabels = mergeOverwrite $topLabels (include "ddp-job.fill" (list $G.pod.priorityLabels (dict "queue" $V.workloadPriorityClass)) | fromJson).v -}}{{- end -}}
{{- $restartPolicy = default (get $E.restart.default $code) $restartPolicy -}}
{{- $rules := get (get $E.restart.rules $restartPolicy) $code -}}
{{- $failurePolicy := dict "maxRestarts" (int64 $V.backoffLimit) -}}
{{- if $rules.failureRules -}}{{- $_ := set $failurePolicy "rules" $rules.failureRules -}}{{- end -}}
{{- $podFailurePolicy := $rules.podFailurePolicy -}}
{{- if $recovery -}}
{{- $podFailurePolicy = $R.rules.podFailurePolicy -}}
{{- if $R.rules.failurePolicy -}}{{- $failurePolicy = $R.rules.failurePolicy -}}{{- end -}}
{{- end -}}
{{- $pullSecrets := list -}}
{{- range $secret := default list $V.imagePullSecrets -}}{{- $pullSecrets = append $pullSecrets (dict "name" $secret) -}}{{- end -}}
{{- $envFrom := list -}}
{{- range $secret := default list $V.envFromSecrets -}}{{- $envFrom = append $envFrom (dict "secretRef" (dict "name" $secret)) -}}{{- end -}}
{{- $view := dict
  "name" $name
  "namespace" $V.namespace
  "target" $V.target
  "topLabels" $topLabels
  "labels" $labels
  "annotations" (default dict $V.annotations)
  "selector" (include "ddp-job.fill" (list $G.pod.selector (dict "name" $name)) | fromJson).v
  "containerName" $E.containerName
  "image" $V.image
  "pullPolicy" $V.imagePullPolicy
  "imagePullSecrets" $pullSecrets
  "args" (concat $extra $args)
  "envFrom" $envFrom
  "port" $port
  "portName" $E.portName
  "podSecurityContext" $security.pod
  "containerSecurityContext" $containerSecurity
  "volumes" $podVolumes
  "volumeMounts" $mounts
  "affinity" $affinity
  "priorityClassName" (default "" $V.priorityClassName)
  "serviceAccountName" (default "" $V.serviceAccountName)
  "restartPolicy" $restartPolicy
  "backoffLimit" (int64 $V.backoffLimit)
  "podFailurePolicy" $podFailurePolicy
  "perIndex" $recovery
  "failurePolicy" $failurePolicy
  "gracePeriod" (int64 $V.gracePeriod)
  "restartFromScratch" (and $usesTrainer (not $V.checkpoints) (not (hasKey $volumes "checkpoints")) (not (has $checkpointFlag $args)))
  "replicas" $replicas
  "elastic" $elastic
  "grouped" $grouped
  "minNodes" $min
  "maxNodes" $max
  "maxRestarts" (int64 $rdzv.maxRestarts)
  "serviceName" $name
  "rank0" $rank0
  "subdomain" (ternary "" (include "ddp-job.format" (list (toString $E.subdomain) (dict "name" $name))) (kindIs "invalid" $E.subdomain))
-}}
{{- if not (kindIs "invalid" $V.ttlSecondsAfterFinished) -}}{{- $_ := set $view "ttl" (int64 $V.ttlSecondsAfterFinished) -}}{{- end -}}
{{- if not (kindIs "invalid" $V.activeDeadlineSeconds) -}}{{- $_ := set $view "deadline" (int64 $V.activeDeadlineSeconds) -}}{{- end -}}

{{- /* One view per node group (Plan.groups, render._group_view); the uniform layout is the one group. */ -}}
{{- $groupViews := list -}}
{{- range $g := $groups -}}
{{- $gv := deepCopy $view -}}
{{- $names := dict "name" $name "group" $g.name -}}
{{- $wired := (include "ddp-job.fill" (list $W.env (mergeOverwrite (deepCopy $wiringArgs) (dict "nproc" $g.nproc "offset" $g.offset))) | fromJson).v -}}
{{- if $recovery -}}
{{- $wired = (include "ddp-job.fill" (list $R.wiring (dict "name" $name "nproc" $g.nproc "offset" $g.offset "rankOffset" $g.rankOffset "worldSize" $worldSize "nodes" $replicas)) | fromJson).v -}}
{{- end -}}
{{- $genv := mergeOverwrite $wired $env (ternary (dict $S.groupEnv $g.name) dict (and $grouped $watch)) $userEnv -}}
{{- $envList := list -}}
{{- if and $W.nodeRankEntry (not $recovery) -}}{{- $envList = append $envList $G.pod.nodeRankEntry -}}{{- end -}}
{{- if or $checks $watch -}}
{{- range $e := $P.downward -}}{{- if not (hasKey $userEnv $e.name) -}}{{- $envList = append $envList $e -}}{{- end -}}{{- end -}}
{{- end -}}
{{- range $key := keys $genv | sortAlpha -}}{{- $envList = append $envList (dict "name" $key "value" (get $genv $key)) -}}{{- end -}}
{{- range $key, $ref := $secretEnv -}}
{{- $envList = append $envList (dict "name" $key "valueFrom" (dict "secretKeyRef" (dict "name" $ref.secret "key" $ref.key))) -}}
{{- end -}}
{{- $gcommand := $entrypoint -}}
{{- if $rewrite -}}
{{- $prefix := (include "ddp-job.fill" (list $rewrite.prefix (dict "nproc" $g.nproc)) | fromJson).v -}}
{{- $gcommand = concat $prefix (slice $entrypoint (int $rewrite.drop)) -}}
{{- end -}}
{{- $res := default dict $V.resources -}}
{{- $gpuResource := default $res.gpuResource $g.gpuResource -}}
{{- $requests := dict -}}
{{- $limits := dict -}}
{{- $cpu := ternary $g.resources.cpu $res.cpu (hasKey $g.resources "cpu") -}}
{{- $memory := ternary $g.resources.memory $res.memory (hasKey $g.resources "memory") -}}
{{- $cpuLimit := ternary (index $g.resources "cpuLimit") $res.cpuLimit (hasKey $g.resources "cpuLimit") -}}
{{- if $cpu -}}{{- $_ := set $requests "cpu" $cpu -}}{{- end -}}
{{- if $memory -}}{{- $_ := set $requests "memory" $memory -}}{{- $_ := set $limits "memory" $memory -}}{{- end -}}
{{- if $cpuLimit -}}{{- $_ := set $limits "cpu" $cpuLimit -}}{{- end -}}
{{- if gt $g.gpus 0 -}}{{- $_ := set $limits $gpuResource $g.gpus -}}{{- end -}}
{{- if $F.resource -}}{{- $_ := set $limits (default $F.resource $res.fabricResource) (int64 (default 1 $res.fabricDevices)) -}}{{- end -}}
{{- $resources := dict -}}
{{- if $limits -}}{{- $_ := set $resources "limits" $limits -}}{{- end -}}
{{- if $requests -}}{{- $_ := set $resources "requests" $requests -}}{{- end -}}
{{- $tolerations := concat (default list $V.tolerations) $g.tolerations -}}
{{- $gpuTolerated := false -}}
{{- range $tol := $tolerations -}}{{- if eq (toString (get $tol "key")) $gpuResource -}}{{- $gpuTolerated = true -}}{{- end -}}{{- end -}}
{{- if and (gt $g.gpus 0) (not $gpuTolerated) -}}
{{- $tolerations = append $tolerations (include "ddp-job.fill" (list $G.pod.gpuToleration (dict "gpu" $gpuResource)) | fromJson).v -}}
{{- end -}}
{{- if $grouped -}}
{{- $groupLabels := (include "ddp-job.fill" (list $G.pod.groupLabels $names) | fromJson).v -}}
{{- $_ := set $gv "labels" (mergeOverwrite (deepCopy $labels) $groupLabels) -}}
{{- $_ := set $gv "topLabels" (mergeOverwrite (deepCopy $topLabels) $groupLabels) -}}
{{- end -}}
{{- $_ := set $gv "name" (include "ddp-job.format" (list $L.workload $names)) -}}
{{- $_ := set $gv "rjob" (ternary "" (include "ddp-job.format" (list (toString $L.replicatedJob) $names)) (kindIs "invalid" $L.replicatedJob)) -}}
{{- $_ := set $gv "group" $g.name -}}
{{- $_ := set $gv "replicas" $g.nodes -}}
{{- $_ := set $gv "nproc" $g.nproc -}}
{{- $_ := set $gv "command" $gcommand -}}
{{- $_ := set $gv "env" $envList -}}
{{- $_ := set $gv "resources" $resources -}}
{{- $_ := set $gv "tolerations" $tolerations -}}
{{- $_ := set $gv "nodeSelector" (mergeOverwrite (deepCopy (default dict $V.nodeSelector)) $g.nodeSelector) -}}
{{- $_ := set $gv "topologyAnnotations" $g.topologyAnnotations -}}
{{- $_ := set $gv "topologyLevel" $g.topologyLevel -}}
{{- $_ := set $gv "podAnnotations" (mergeOverwrite (deepCopy (default dict $V.annotations)) $g.topologyAnnotations) -}}
{{- $groupViews = append $groupViews $gv -}}
{{- end -}}
{{- /* The job-wide view takes the first group's pod fields (TrainJob, PyTorchJob and the Service use it). */ -}}
{{- $g0 := index $groupViews 0 -}}
{{- range $key := list "labels" "command" "env" "resources" "tolerations" "nodeSelector" "rjob" "nproc" "podAnnotations" -}}
{{- $_ := set $view $key (get $g0 $key) -}}
{{- end -}}
{{- $_ := set $view "groups" $groupViews -}}
{{- /* The coordinator's pod (render._coordinator_view): the trainer image, the job's scheduling, no GPU, volume, Secret or queue. */ -}}
{{- if $recovery -}}
{{- $RC := (include "ddp-job.fill" (list $R.coordinator (dict "name" $name "worldSize" $worldSize)) | fromJson).v -}}
{{- $cLabels := mergeOverwrite (deepCopy $labels) $RC.labels -}}
{{- $c := deepCopy $view -}}
{{- range $key := list "groups" "podAnnotations" "rjob" "nproc" "envFrom" -}}{{- $_ := unset $c $key -}}{{- end -}}
{{- $_ := set $c "name" $RC.name -}}
{{- $_ := set $c "hostname" $RC.hostname -}}
{{- $_ := set $c "subdomain" $name -}}
{{- $_ := set $c "topLabels" $cLabels -}}
{{- $_ := set $c "labels" $cLabels -}}
{{- $_ := set $c "containerName" $RC.container_name -}}
{{- $_ := set $c "command" $RC.command -}}
{{- $_ := set $c "args" $RC.args -}}
{{- $_ := set $c "env" $RC.env -}}
{{- $_ := set $c "port" $RC.port -}}
{{- $_ := set $c "portName" $RC.port_name -}}
{{- $_ := set $c "resources" $RC.resources -}}
{{- $_ := set $c "volumes" list -}}
{{- $_ := set $c "volumeMounts" list -}}
{{- $_ := set $c "tolerations" (default list $V.tolerations) -}}
{{- $_ := set $c "nodeSelector" (default dict $V.nodeSelector) -}}
{{- $_ := set $c "restartPolicy" "Never" -}}
{{- $_ := set $c "rjob" $RC.rjob -}}
{{- $_ := set $view "coordinator" $c -}}
{{- end -}}
{{- $_ := set $view "podsetGroup" $T.podsetGroup -}}
{{- toJson $view -}}
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
{{- if $v.hostname }}
  hostname: {{ include "ddp-job.json" $v.hostname }}
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
