package telemetry

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sync"
)

// Label kinds: the tenant-typed strings that name series.
const (
	labelCluster  = "cluster"
	labelInstance = "instance"
	labelModel    = "model"
)

// LabelOther is the value every tenant-typed label takes once its kind
// has Config.MaxLabelValues distinct values.
const LabelOther = "other"

// labeler turns tenant-typed strings (cluster and instance ids, model
// names) into label values that neither reveal them nor grow without
// bound: the value is the kind's first letter, "_", and the first 12 hex
// digits (48 bits) of HMAC-SHA256(Config.LabelKey, kind ‖ 0 ‖ value), so it
// is stable across restarts and replicas sharing the key and cannot be
// reversed (not even for a guessable model name) without it; once a kind
// has Config.MaxLabelValues distinct values, further ones share LabelOther.
// Safe for concurrent use.
type labeler struct {
	key []byte
	max int

	mu   sync.Mutex
	seen map[string]map[string]string // kind → value → label
}

func newLabeler(key []byte, max int) *labeler {
	return &labeler{key: key, max: max, seen: map[string]map[string]string{}}
}

// Label returns the label value of a tenant-typed string of the kind
// (cluster, instance or model) under key: what the series carry. The
// operator's mapping from an id to its series (the dashboard's own cluster
// page shows it too) is this function; it does not apply the cardinality
// bound.
func Label(key []byte, kind, value string) string {
	if value == "" {
		return ""
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(kind))
	mac.Write([]byte{0})
	mac.Write([]byte(value))
	sum := mac.Sum(nil)
	return kind[:1] + "_" + hex.EncodeToString(sum[:6])
}

func (l *labeler) label(kind, value string) string {
	if value == "" {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.seen[kind]
	if m == nil {
		m = map[string]string{}
		l.seen[kind] = m
	}
	if v, ok := m[value]; ok {
		return v
	}
	if len(m) >= l.max {
		return LabelOther
	}
	v := Label(l.key, kind, value)
	m[value] = v
	return v
}

// reverse returns kind → label → value for the values seen so far (tests).
func (l *labeler) reverse() map[string]map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]map[string]string{}
	for kind, m := range l.seen {
		out[kind] = map[string]string{}
		for v, lab := range m {
			out[kind][lab] = v
		}
	}
	return out
}

func (l *labeler) cluster(id string) string  { return l.label(labelCluster, id) }
func (l *labeler) instance(id string) string { return l.label(labelInstance, id) }
func (l *labeler) model(name string) string  { return l.label(labelModel, name) }

// policyNames are the policy label's values; anything else is "other".
var policyNames = map[string]bool{
	"routebalance": true, "round-robin": true, "shortest-queue": true, "quality-only": true,
	"threshold": true, "chimera": true, "oracle": true,
}

// knownPolicy bounds the policy label: "" is "default", unknown names
// "other".
func knownPolicy(p string) string {
	switch {
	case p == "":
		return "default"
	case policyNames[p]:
		return p
	}
	return LabelOther
}

// statusNames are the status label's values.
var statusNames = map[string]bool{"ok": true, "error": true, "cancelled": true, "budget": true, "truncated": true}

func boundedStatus(s string) string {
	switch {
	case s == "":
		return "unknown"
	case statusNames[s]:
		return s
	}
	return LabelOther
}

// finiteNonNeg is v when it is a finite number ≥ 0, else 0: a counter must
// never take NaN or +Inf (one bad event would poison the series forever).
func finiteNonNeg(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	return v
}
