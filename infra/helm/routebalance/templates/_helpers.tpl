{{/* Chart name, truncated to the 63 characters DNS labels allow. */}}
{{- define "routebalance.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name. */}}
{{- define "routebalance.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "routebalance.selectorLabels" -}}
app.kubernetes.io/name: {{ include "routebalance.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "routebalance.labels" -}}
{{ include "routebalance.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "routebalance.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "routebalance.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret with jwt-secret, encryption-key and the Stripe keys. */}}
{{- define "routebalance.secretName" -}}
{{- default (include "routebalance.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The Secret with database-url, when a database is configured. */}}
{{- define "routebalance.databaseSecretName" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- include "routebalance.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* The Secret with redis-url, when Redis is configured. */}}
{{- define "routebalance.redisSecretName" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- include "routebalance.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "routebalance.usesRedis" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "routebalance.usesPostgres" -}}
{{- if or .Values.database.url .Values.database.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* Guard rails: SQLite cannot be shared between replicas, and limits and
budgets hold across replicas only when counted in Redis. */}}
{{- define "routebalance.validate" -}}
{{- $multi := or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled -}}
{{- if not (has (toString .Values.redis.failMode) (list "open" "closed")) -}}
{{- fail (printf "redis.failMode must be open or closed, got %q" (toString .Values.redis.failMode)) -}}
{{- end -}}
{{- if and $multi (not (include "routebalance.usesPostgres" .)) -}}
{{- fail "more than one replica (replicaCount > 1 or autoscaling) needs an external Postgres: set database.url or database.existingSecret" -}}
{{- end -}}
{{- if and $multi (not (include "routebalance.usesRedis" .)) -}}
{{- fail "more than one replica (replicaCount > 1 or autoscaling) needs Redis, or every replica enforces rate limits and budgets alone (a tenant gets N× them): set redis.url or redis.existingSecret" -}}
{{- end -}}
{{- if and (include "routebalance.usesPostgres" .) (not .Values.secrets.existingSecret) -}}
{{- if not (and .Values.secrets.jwtSecret .Values.secrets.encryptionKey) -}}
{{- fail "with Postgres every replica needs the same keys: set secrets.existingSecret, or secrets.jwtSecret and secrets.encryptionKey" -}}
{{- end -}}
{{- end -}}
{{- end -}}
