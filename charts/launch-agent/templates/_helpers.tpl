{{/*
Names, labels and the derived lists every template shares.

Design notes:
- Every object name is release-scoped (W&B's `git-creds` and `azure-storage-access-key` were not).
- Every namespaced object goes to one namespace, `launch-agent.namespace`: `.Values.namespace`
  (W&B's key) when set, else the release namespace. W&B's chart used `.Values.namespace` for all
  objects but the PDB and hard-coded `wandb` for two Secrets; here nothing is hard-coded.
- The API-key Secret keeps W&B's name `wandb-api-key-<release>` and key `password`, so a W&B
  user with `agent.useExternalWandbSecret: true` keeps the Secret they already created.
*/}}

{{- define "launch-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "launch-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "launch-agent.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* Selector labels: stable for the life of the release (a Deployment selector is immutable). */}}
{{- define "launch-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "launch-agent.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "launch-agent.labels" -}}
{{ include "launch-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end -}}

{{/* The API-key Secret's name: W&B's name unless `existingSecret` names another one. */}}
{{- define "launch-agent.apiKeySecretName" -}}
{{- if .Values.existingSecret -}}
{{- .Values.existingSecret -}}
{{- else -}}
{{- printf "wandb-api-key-%s" (include "launch-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "launch-agent.apiKeySecretKey" -}}
{{- if .Values.existingSecret -}}{{ .Values.existingSecretKey }}{{- else -}}password{{- end -}}
{{- end -}}

{{/*
The API key: `agent.apiKey`, else a dotted top-level `agent.apiKey` key (an early W&B CI file
wrote it that way; W&B's chart ignored it, so its author's intent is the only meaning it has).
*/}}
{{- define "launch-agent.apiKey" -}}
{{- .Values.agent.apiKey | default (index .Values "agent.apiKey") | default "" -}}
{{- end -}}

{{/* True when the chart renders the API-key Secret itself (no external or existing Secret). */}}
{{- define "launch-agent.createApiKeySecret" -}}
{{- if and (not .Values.existingSecret) (not .Values.agent.useExternalWandbSecret) -}}true{{- end -}}
{{- end -}}

{{- define "launch-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "wandb-launch-serviceaccount-%s" (include "launch-agent.fullname" .)) .Values.serviceAccount.name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
`agent.image` (W&B's key, a full reference) wins over `image.repository:image.tag`, except when it
names W&B's own agent image (`wandb/launch-agent`, `wandb/launch-agent-dev`, with or without a
registry host): that image does not understand this chart's arguments and crash-loops, so this
chart's image is used instead and NOTES says so.
*/}}
{{- define "launch-agent.isWandbImage" -}}
{{- if regexMatch "^(([^/]+\\.[^/]+|docker\\.io)/)?wandb/launch-agent[^/:@]*([:@].*)?$" (.Values.agent.image | default "") -}}true{{- end -}}
{{- end -}}

{{- define "launch-agent.image" -}}
{{- if and .Values.agent.image (not (include "launch-agent.isWandbImage" .)) -}}
{{- .Values.agent.image -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Target namespaces as a JSON list: the agent's namespace first, then W&B's
`additionalTargetNamespaces`, without duplicates. Templates read it with `fromJsonArray`.
*/}}
{{- define "launch-agent.targetNamespaces" -}}
{{- $all := prepend (.Values.additionalTargetNamespaces | default list) (include "launch-agent.namespace" .) -}}
{{- uniq $all | toJson -}}
{{- end -}}

{{- define "launch-agent.kanikoNamespace" -}}
{{- default (printf "%s-kaniko" (include "launch-agent.fullname" .)) .Values.kaniko.namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "launch-agent.kanikoServiceAccountName" -}}
{{- default (printf "%s-kaniko" (include "launch-agent.fullname" .)) .Values.kaniko.serviceAccount.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "launch-agent.queueSpecsConfigMapName" -}}
{{- if .Values.existingQueueSpecsConfigMap -}}
{{- .Values.existingQueueSpecsConfigMap -}}
{{- else -}}
{{- printf "%s-queue-specs" (include "launch-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The workload kinds the agent may create, as a JSON list of RBAC rules (one per enabled kind).
The table below is the only place that maps a `workloads.<key>` toggle to an API group.
*/}}
{{- define "launch-agent.workloadRules" -}}
{{- $table := dict
  "job" (list "batch" "jobs")
  "jobset" (list "jobset.x-k8s.io" "jobsets")
  "pytorchjob" (list "kubeflow.org" "pytorchjobs")
  "trainjob" (list "trainer.kubeflow.org" "trainjobs")
  "leaderworkerset" (list "leaderworkerset.x-k8s.io" "leaderworkersets")
  "rayjob" (list "ray.io" "rayjobs")
  "volcanojob" (list "batch.volcano.sh" "jobs")
-}}
{{- $rules := list -}}
{{- range $key := keys $table | sortAlpha -}}
{{- if index $.Values.workloads $key -}}
{{- $entry := index $table $key -}}
{{- $rules = append $rules (dict "apiGroups" (list (index $entry 0)) "resources" (list (index $entry 1)) "verbs" (list "create" "get" "list" "watch" "delete")) -}}
{{- end -}}
{{- end -}}
{{- $rules | toJson -}}
{{- end -}}

{{/*
The launch config the agent reads (`LAUNCH_AGENT_CONFIG`): W&B's `launchConfig`, a YAML string as
in W&B's chart (kept verbatim, so the agent's `file:LINE` errors point at the admin's own lines)
or a mapping, plus a `quota:` block from the chart's `quota` values. Text that is not a YAML
mapping, or that holds `api_key`, fails the render instead of shipping a ConfigMap the agent
would refuse at start-up.
*/}}
{{- define "launch-agent.launchConfig" -}}
{{- $text := "" -}}
{{- $cfg := dict -}}
{{- if kindIs "string" .Values.launchConfig -}}
{{- $text = .Values.launchConfig | trimSuffix "\n" -}}
{{- if trim $text -}}
{{- $cfg = fromYaml $text -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "launchConfig: not a YAML mapping of launch-config keys: %s" (get $cfg "Error")) -}}
{{- end -}}
{{- end -}}
{{- else if kindIs "map" .Values.launchConfig -}}
{{- $cfg = .Values.launchConfig -}}
{{- if $cfg -}}{{- $text = toYaml $cfg -}}{{- end -}}
{{- end -}}
{{- if hasKey $cfg "api_key" -}}
{{- fail "launchConfig: api_key may not be stored in the launch config (the agent refuses it); set agent.apiKey or existingSecret instead" -}}
{{- end -}}
{{- $workers := include "launch-agent.multikueueEntries" . | fromJsonArray -}}
{{- if $workers -}}
{{- if hasKey $cfg "multikueue" -}}
{{- /*
Two `multikueue:` keys would be a duplicate key the agent refuses, so the admin's block and the
chart's are merged and the whole config is written from its parsed form (comments dropped).
A copy: the mapping form of `launchConfig` is .Values itself, which later renders read again.
*/ -}}
{{- $cfg = deepCopy $cfg -}}
{{- $mk := get $cfg "multikueue" -}}
{{- if not (kindIs "map" $mk) -}}
{{- fail "launchConfig: multikueue is not a mapping, so the chart's multikueue.workers cannot be added to it; list the workers in one place" -}}
{{- end -}}
{{- $given := $mk.workers | default list -}}
{{- if not (kindIs "slice" $given) -}}
{{- fail "launchConfig: multikueue.workers is not a list, so the chart's multikueue.workers cannot be added to it; list the workers in one place" -}}
{{- end -}}
{{- range $i, $w := $given -}}
{{- $name := "" -}}
{{- if kindIs "map" $w -}}{{- $name = toString (get $w "name") -}}{{- end -}}
{{- range $workers -}}
{{- if eq $name .name -}}
{{- fail (printf "multikueue.workers: worker %q is also listed in launchConfig (multikueue.workers[%d]); give each worker in one place" .name $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $mk "workers" (concat $given $workers) -}}
{{- $text = printf "# The chart's multikueue.workers merged into launchConfig's.\n%s" (toYaml $cfg) -}}
{{- else -}}
{{- $text = printf "%s\n# From the chart's multikueue values.\n%s" $text (dict "multikueue" (dict "workers" $workers) | toYaml) | trimPrefix "\n" -}}
{{- end -}}
{{- end -}}
{{- $mode := include "launch-agent.quotaMode" . -}}
{{- if ne $mode "off" -}}
{{- if hasKey $cfg "quota" -}}
{{- fail (printf "launchConfig: has its own quota block while quota.mode is %q; set admission in one place (remove one of them)" $mode) -}}
{{- end -}}
{{- $quota := dict "mode" $mode -}}
{{- if .Values.quota.tree -}}
{{- $_ := set $quota "tree" .Values.quota.tree -}}
{{- end -}}
{{- if .Values.quota.kueue.defaultLocalQueue -}}
{{- $_ := set $quota "kueue" (dict "default_local_queue" .Values.quota.kueue.defaultLocalQueue) -}}
{{- end -}}
{{- $text = printf "%s\n# From the chart's quota values.\n%s" $text (dict "quota" $quota | toYaml) | trimPrefix "\n" -}}
{{- end -}}
{{- if $text -}}{{- printf "%s\n" $text -}}{{- end -}}
{{- end -}}

{{/*
`multikueue.workers` as a JSON list of {name, secretName, key, context, volume, dir}: the Secret
volume of each worker and the directory it is mounted at. The name is checked here rather than
only by the schema, for a message that says what the name is for; it becomes a directory, so it
is also what keeps one worker's mount out of another's.
*/}}
{{- define "launch-agent.multikueueWorkers" -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range $i, $w := (.Values.multikueue | default dict).workers | default list -}}
{{- $name := toString $w.name -}}
{{- if not (and (le (len $name) 253) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $name)) -}}
{{- fail (printf "multikueue.workers[%d].name: %q is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 characters): it must be the worker's MultiKueueCluster name on the manager" $i $name) -}}
{{- end -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "multikueue.workers[%d].name: worker %q is already multikueue.workers[%d]; list each worker once" $i $name (get $seen $name)) -}}
{{- end -}}
{{- $_ := set $seen $name $i -}}
{{- $entry := dict "name" $name "secretName" $w.secretName "key" ($w.key | default "kubeconfig") "volume" (printf "multikueue-worker-%d" $i) "dir" (printf "/etc/launch-agent/workers/%s" $name) -}}
{{- if $w.context -}}{{- $_ := set $entry "context" $w.context -}}{{- end -}}
{{- $out = append $out $entry -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/* The same workers as the launch config's `multikueue.workers` entries, as a JSON list. */}}
{{- define "launch-agent.multikueueEntries" -}}
{{- $out := list -}}
{{- range include "launch-agent.multikueueWorkers" . | fromJsonArray -}}
{{- $entry := dict "name" .name "kubeconfig" (printf "%s/kubeconfig" .dir) -}}
{{- if .context -}}{{- $_ := set $entry "context" .context -}}{{- end -}}
{{- $out = append $out $entry -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/* Restricted Pod Security Standard, pod level. */}}
{{- define "launch-agent.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Restricted Pod Security Standard, container level, read-only root file system. */}}
{{- define "launch-agent.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
`additionalEnvVars` / `additionalSecretEnvVars` as env entries. W&B's values declared them as maps
but its templates iterated them as lists of {name, value}; both shapes are accepted here, and every
value is quoted (W&B emitted `value: true` unquoted, which the API server rejects).
Call with (dict "vars" <list or map> "secret" <Secret name, or "" for plain values>).
*/}}
{{- define "launch-agent.envList" -}}
{{- $pairs := list -}}
{{- if kindIs "map" .vars -}}
{{- range $name := keys .vars | sortAlpha -}}
{{- $pairs = append $pairs (dict "name" $name "value" (index $.vars $name)) -}}
{{- end -}}
{{- else -}}
{{- $pairs = .vars | default list -}}
{{- end -}}
{{- range $pairs }}
- name: {{ .name | quote }}
{{- if $.secret }}
  valueFrom:
    secretKeyRef:
      name: {{ $.secret | quote }}
      key: {{ .name | quote }}
{{- else }}
  value: {{ .value | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The same pairs as a name -> value map, for the Secret that holds them. */}}
{{- define "launch-agent.envMap" -}}
{{- $out := dict -}}
{{- if kindIs "map" . -}}
{{- range $name, $value := . -}}
{{- $_ := set $out $name ($value | toString) -}}
{{- end -}}
{{- else -}}
{{- range . -}}
{{- $_ := set $out .name (.value | toString) -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/*
A map without its null values, as JSON: W&B's values list annotation keys with no value
(`iam.gke.io/gcp-service-account:`) as examples, which its chart rendered as empty strings.
*/}}
{{- define "launch-agent.withoutNulls" -}}
{{- $out := dict -}}
{{- range $key, $value := . | default dict -}}
{{- if not (kindIs "invalid" $value) -}}{{- $_ := set $out $key $value -}}{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/* The custom CA bundle's ConfigMap as JSON {name, key}, or {} when W&B's empty default is set. */}}
{{- define "launch-agent.customCA" -}}
{{- $cm := (.Values.customCABundle | default dict).configMap | default dict -}}
{{- if and $cm.name $cm.key -}}{{- dict "name" $cm.name "key" $cm.key | toJson -}}{{- else -}}{}{{- end -}}
{{- end -}}

{{/* `quota.mode` as a string; YAML reads an unquoted `off` as false. */}}
{{- define "launch-agent.quotaMode" -}}
{{- if kindIs "bool" .Values.quota.mode -}}off{{- else -}}{{ .Values.quota.mode }}{{- end -}}
{{- end -}}

{{- /*
Leader election (docs/operations.md, "High availability"): on unless turned off, which only one
replica may do. The Lease is named after the release, in the agent's namespace.
*/ -}}
{{- define "launch-agent.leaderElection" -}}
{{- $replicas := int .Values.agent.replicas -}}
{{- $on := .Values.agent.leaderElection.enabled -}}
{{- if and (gt $replicas 1) (not $on) -}}
{{- fail (printf "agent.replicas is %d but agent.leaderElection.enabled is false: more than one replica needs the leader Lease (two agents would pop the same queues)" $replicas) -}}
{{- end -}}
{{- if $on }}true{{ end -}}
{{- end -}}

{{- define "launch-agent.leaseName" -}}
{{- .Values.agent.leaderElection.leaseName | default (include "launch-agent.fullname" .) -}}
{{- end -}}

{{/* A PodDisruptionBudget count or percentage: digits as the number, `N%` quoted. */}}
{{- define "launch-agent.intOrPercent" -}}
{{- if and (kindIs "string" .) (hasSuffix "%" .) -}}
{{- . | quote -}}
{{- else -}}
{{- . | int -}}
{{- end -}}
{{- end -}}

{{- define "launch-agent.workerRbacConfigMapName" -}}
{{- printf "%s-multikueue-worker-rbac" (include "launch-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "launch-agent.workerReaderName" -}}
{{- printf "%s-worker-reader" (include "launch-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
files/multikueue-worker-rbac.yaml for this release, as the text an admin applies on a worker
(templates/multikueue-worker-rbac.yaml). The same objects and rules as the file, named after
the release so that two agents' readers on one worker stay apart. The service account lives in
a namespace named like the agent's own; every value is quoted, so a name cannot add a key.
*/}}
{{- define "launch-agent.workerRbac" -}}
{{- $ns := include "launch-agent.namespace" . -}}
{{- $reader := include "launch-agent.workerReaderName" . -}}
{{- $role := printf "%s-%s-worker-reader" $ns (include "launch-agent.fullname" .) | trunc 253 -}}
# Read-only access for launch-agent {{ include "launch-agent.fullname" . | quote }} on a MultiKueue worker cluster.
# Apply it on every worker, never on the manager (docs/multicluster.md).
apiVersion: v1
kind: Namespace
metadata:
  name: {{ $ns | quote }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $reader | quote }}
  namespace: {{ $ns | quote }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ printf "%s-token" $reader | trunc 253 | quote }}
  namespace: {{ $ns | quote }}
  annotations:
    kubernetes.io/service-account.name: {{ $reader | quote }}
type: kubernetes.io/service-account-token
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $role | quote }}
rules:
  - apiGroups: [""]
    resources: ["pods", "events"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["pods/log"]
    verbs: ["get"]
  - apiGroups: [""]
    resources: ["secrets"]
    resourceNames: [{{ include "launch-agent.apiKeySecretName" . | quote }}]
    verbs: ["get"]
{{- range $target := include "launch-agent.targetNamespaces" . | fromJsonArray }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $role | quote }}
  namespace: {{ $target | quote }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $role | quote }}
subjects:
  - kind: ServiceAccount
    name: {{ $reader | quote }}
    namespace: {{ $ns | quote }}
{{- end }}
{{ end -}}
