{{/* Labels every object carries. */}}
{{- define "shipshape.labels" -}}
app.kubernetes.io/part-of: shipshape
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The controller's selector: the webhook configuration's objectSelector excludes this label value,
so the controller never places its own pods. */}}
{{- define "shipshape.controller.selector" -}}
app.kubernetes.io/name: shipshape-controller
{{- end }}

{{- define "shipshape.nodeNotices.selector" -}}
app.kubernetes.io/name: shipshape-node-notices
{{- end }}

{{- define "shipshape.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Whether to ship the ValidatingAdmissionPolicies: "auto" when the cluster serves
admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (GA in Kubernetes 1.30). */}}
{{- define "shipshape.vap.enabled" -}}
{{- $setting := .Values.validatingAdmissionPolicy.enabled | toString -}}
{{- if eq $setting "true" -}}
true
{{- else if eq $setting "auto" -}}
{{- if or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{- define "shipshape.controller.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.serviceAccount.controller.name }}
{{- end }}

{{- define "shipshape.nodeNotices.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.serviceAccount.nodeNotices.name }}
{{- end }}

{{- define "shipshape.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
{{- end }}

{{- define "shipshape.agent.selector" -}}
app.kubernetes.io/name: shipshape-agent
{{- end }}
