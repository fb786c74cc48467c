{{/* Names and labels. */}}
{{- define "cowork-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cowork-fleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cowork-fleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "cowork-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: call with (list $ "coordinator"). */}}
{{- define "cowork-fleet.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "cowork-fleet.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "cowork-fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cowork-fleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cowork-fleet.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Endpoints: the explicit one, else the bundled service, else a clear failure. */}}
{{- define "cowork-fleet.natsUrl" -}}
{{- if .Values.natsConnection.url -}}
{{- .Values.natsConnection.url -}}
{{- else if .Values.nats.enabled -}}
{{- printf "nats://%s-nats:4222" .Release.Name -}}
{{- else -}}
{{- fail "natsConnection.url is required (or set nats.enabled=true for the bundled NATS)" -}}
{{- end -}}
{{- end -}}

{{/* Replicas of the fleet's streams: fleet.natsReplicas, else the bundled cluster's size, else
none (the fleet finds it from the server). */}}
{{- define "cowork-fleet.natsReplicas" -}}
{{- if .Values.fleet.natsReplicas -}}
{{- .Values.fleet.natsReplicas -}}
{{- else if and .Values.nats.enabled .Values.nats.config.cluster.enabled -}}
{{- .Values.nats.config.cluster.replicas -}}
{{- else if .Values.nats.enabled -}}
1
{{- end -}}
{{- end -}}

{{- define "cowork-fleet.natsMonitoringEndpoint" -}}
{{- if .Values.natsConnection.monitoringEndpoint -}}
{{- .Values.natsConnection.monitoringEndpoint -}}
{{- else if .Values.nats.enabled -}}
{{- printf "%s-nats.%s.svc:8222" .Release.Name .Release.Namespace -}}
{{- else -}}
{{- fail "keda.enabled needs natsConnection.monitoringEndpoint (host:port of the NATS monitoring endpoint)" -}}
{{- end -}}
{{- end -}}

{{- define "cowork-fleet.s3Endpoint" -}}
{{- if .Values.s3.endpoint -}}
{{- .Values.s3.endpoint -}}
{{- else if .Values.minio.enabled -}}
{{- printf "http://%s-minio:9000" .Release.Name -}}
{{- end -}}
{{- end -}}

{{/* Secret names: an existing Secret wins over the one the chart creates. */}}
{{- define "cowork-fleet.s3SecretName" -}}
{{- default (include "cowork-fleet.fullname" .) .Values.s3.existingSecret -}}
{{- end -}}
{{- define "cowork-fleet.natsSecretName" -}}
{{- default (include "cowork-fleet.fullname" .) .Values.natsConnection.existingSecret -}}
{{- end -}}
{{- define "cowork-fleet.apiSecretName" -}}
{{- default (include "cowork-fleet.fullname" .) .Values.coordinator.existingSecret -}}
{{- end -}}
{{- define "cowork-fleet.harnessSecretName" -}}
{{- default (printf "%s-harness" (include "cowork-fleet.fullname" .)) .Values.harness.existingSecret -}}
{{- end -}}

{{/* Does the chart create its own Secret (any of S3, NATS or API token not from an existing one)? */}}
{{- define "cowork-fleet.createsSecret" -}}
{{- if or (not .Values.s3.existingSecret) (and (not .Values.natsConnection.existingSecret) (or .Values.natsConnection.password .Values.natsConnection.token)) (and (not .Values.coordinator.existingSecret) .Values.coordinator.apiToken) -}}
true
{{- end -}}
{{- end -}}

{{/* Environment shared by coordinator and worker: the ConfigMap plus the connection secrets. */}}
{{- define "cowork-fleet.connectionEnv" -}}
- name: COWORK_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "cowork-fleet.s3SecretName" . }}
      key: {{ .Values.s3.secretAccessKeyKey }}
{{- if or .Values.natsConnection.existingSecret .Values.natsConnection.password }}
- name: COWORK_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "cowork-fleet.natsSecretName" . }}
      key: {{ .Values.natsConnection.passwordKey }}
      optional: true
{{- end }}
{{- if or .Values.natsConnection.existingSecret .Values.natsConnection.token }}
- name: COWORK_NATS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "cowork-fleet.natsSecretName" . }}
      key: {{ .Values.natsConnection.tokenKey }}
      optional: true
{{- end }}
{{- if .Values.natsConnection.credsSecret }}
- name: COWORK_NATS_CREDS
  value: /etc/cowork/nats/{{ .Values.natsConnection.credsSecretKey }}
{{- end }}
{{- end -}}

{{- define "cowork-fleet.natsCredsVolume" -}}
{{- if .Values.natsConnection.credsSecret }}
- name: nats-creds
  secret:
    secretName: {{ .Values.natsConnection.credsSecret }}
    items:
      - key: {{ .Values.natsConnection.credsSecretKey }}
        path: {{ .Values.natsConnection.credsSecretKey }}
{{- end }}
{{- end -}}

{{- define "cowork-fleet.natsCredsMount" -}}
{{- if .Values.natsConnection.credsSecret }}
- name: nats-creds
  mountPath: /etc/cowork/nats
  readOnly: true
{{- end }}
{{- end -}}

{{/* Grace period of a worker pod: the longest job plus the time to store and ack it. */}}
{{- define "cowork-fleet.workerGracePeriod" -}}
{{- add (int .Values.worker.drain.longestJobSeconds) (int .Values.worker.drain.drainMarginSeconds) -}}
{{- end -}}

{{/* Per-role NATS users (natsRoles): "true" when on. Unset, they follow the bundled NATS. */}}
{{- define "cowork-fleet.natsRoles" -}}
{{- $on := .Values.natsRoles.enabled -}}
{{- if kindIs "invalid" $on -}}
{{- $on = .Values.nats.enabled -}}
{{- end -}}
{{- if $on -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret of the role passwords: the named one, else the one the chart generates. The
bundled NATS computes the same name (values.yaml, nats.container.env). */}}
{{- define "cowork-fleet.natsRolesSecretName" -}}
{{- default (printf "%s-cowork-nats-roles" .Release.Name) .Values.global.coworkNatsRolesSecret -}}
{{- end -}}

{{/* Settings that cannot work together with the per-role users, or without them. */}}
{{- define "cowork-fleet.checkNatsRoles" -}}
{{- $n := .Values.natsConnection -}}
{{- if include "cowork-fleet.natsRoles" . -}}
{{- if or $n.user $n.password $n.token $n.existingSecret $n.credsSecret -}}
{{- fail "natsRoles gives each Deployment its own NATS user: leave natsConnection.user, password, token, existingSecret and credsSecret empty, or set natsRoles.enabled=false" -}}
{{- end -}}
{{- else if and .Values.nats.enabled (hasKey (.Values.nats.config.merge | default dict) "00$include") -}}
{{- fail "natsRoles.enabled=false, but the bundled NATS still asks for the users of docs/nats/cowork-users.conf: also set nats.config.merge={}, nats.configMap.merge={} and nats.container.env={} to run it without users" -}}
{{- end -}}
{{- end -}}

{{/* The NATS user and password of one role: call with (list $ "coordinator") or (list $ "worker").
Only that role's key of the Secret is referenced. */}}
{{- define "cowork-fleet.natsRoleEnv" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- if include "cowork-fleet.natsRoles" $root }}
- name: COWORK_NATS_USER
  value: {{ index $root.Values.natsRoles (printf "%sUser" $role) | quote }}
- name: COWORK_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "cowork-fleet.natsRolesSecretName" $root }}
      key: {{ $role }}-password
{{- end }}
{{- end -}}
