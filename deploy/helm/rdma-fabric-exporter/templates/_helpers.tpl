{{/* The objects' name prefix: the release name unless fullnameOverride is set. */}}
{{- define "rfe.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "rfe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rfe.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "node-agent") */}}
{{- define "rfe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rfe.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rfe.labels" -}}
{{ include "rfe.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rfe.image" -}}
{{- $image := .Values.image -}}
{{- $repository := $image.repository -}}
{{- if $image.registry }}{{ $repository = printf "%s/%s" $image.registry $image.repository }}{{ end -}}
{{- if $image.digest -}}
{{ $repository }}@{{ $image.digest }}
{{- else -}}
{{ $repository }}:{{ default .Chart.AppVersion $image.tag }}
{{- end -}}
{{- end -}}

{{- define "rfe.webConfigured" -}}
{{- if or .Values.web.existingSecret .Values.web.tls.enabled .Values.web.basicAuthUsers .Values.web.headers }}true{{ end -}}
{{- end -}}

{{- define "rfe.webSecretName" -}}
{{- default (printf "%s-web-config" (include "rfe.fullname" .)) .Values.web.existingSecret -}}
{{- end -}}

{{/* http or https, for probes (upper case) and monitors. */}}
{{- define "rfe.scheme" -}}
{{- if .Values.web.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The args every component ends with: listen address, logging, web config. */}}
{{- define "rfe.commonArgs" -}}
- --web.listen-address=:{{ .Values.web.port }}
- --log.format={{ .Values.logFormat }}
{{- if ne .Values.logLevel "info" }}
- --log.level={{ .Values.logLevel }}
{{- end }}
{{- end -}}

{{- define "rfe.webArgs" -}}
{{- if include "rfe.webConfigured" . }}
- --web.config.file=/etc/rdma-fabric-exporter-web/web.yml
{{- end }}
{{- end -}}

{{- define "rfe.webVolumeMounts" -}}
{{- if include "rfe.webConfigured" . }}
- name: web-config
  mountPath: /etc/rdma-fabric-exporter-web
  readOnly: true
{{- if and .Values.web.tls.enabled (not .Values.web.existingSecret) }}
- name: web-tls
  mountPath: /etc/rdma-fabric-exporter-tls
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "rfe.webVolumes" -}}
{{- if include "rfe.webConfigured" . }}
- name: web-config
  secret:
    secretName: {{ include "rfe.webSecretName" . }}
{{- if and .Values.web.tls.enabled (not .Values.web.existingSecret) }}
- name: web-tls
  secret:
    secretName: {{ required "web.tls.secretName: the kubernetes.io/tls Secret with tls.crt and tls.key" .Values.web.tls.secretName }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Liveness and readiness probes: (dict "ctx" $ "probe" .Values.x.livenessProbe) */}}
{{- define "rfe.probe" -}}
{{- if .ctx.Values.web.basicAuthUsers -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: /healthz
  port: metrics
{{- if .ctx.Values.web.tls.enabled }}
  scheme: HTTPS
{{- end }}
{{- end }}
{{- with .probe }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod annotations for annotation-based discovery, when no operator object scrapes the pods. */}}
{{- define "rfe.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.web.port | quote }}
prometheus.io/path: /metrics
{{- if .Values.web.tls.enabled }}
prometheus.io/scheme: https
{{- end }}
{{- end -}}

{{/* Endpoint settings shared by the monitors: (dict "ctx" $ "monitor" .Values.x.serviceMonitor) */}}
{{- define "rfe.endpointAuth" -}}
{{- $scheme := default (include "rfe.scheme" .ctx) .monitor.scheme -}}
{{- if ne $scheme "http" }}
scheme: {{ $scheme }}
{{- end }}
{{- with .monitor.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .monitor.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The node agent's config.yml when it probes: the `probe:` section, its peers the agents
behind the chart's headless Service (nodeAgent.probe.config adds or overrides keys). */}}
{{- define "rfe.nodeAgentConfig" -}}
{{- $p := .Values.nodeAgent.probe -}}
{{- $peers := printf "%s-node-agent-peers.%s.svc.%s:%v" (include "rfe.fullname" .) (include "rfe.namespace" .) $p.clusterDomain .Values.web.port -}}
{{- toYaml (dict "probe" (merge (deepCopy $p.config) (dict "peers_dns" $peers))) -}}
{{- end -}}
