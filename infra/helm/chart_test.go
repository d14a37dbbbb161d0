// Package helm holds the RouteBalance Helm chart and the test that renders
// it offline and decodes every object strictly into the typed Kubernetes
// API structs, so a typo in a template fails the build.
package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "routebalance"

// newObject returns an empty typed object for an apiVersion/kind.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	}
	return nil, false
}

// render renders the chart with the values file (relative to the chart;
// "" for the defaults) merged with overrides.
func render(t *testing.T, c *chart.Chart, valuesFile string, overrides map[string]any) (map[string]string, error) {
	t.Helper()
	vals := map[string]any{}
	if valuesFile != "" {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, valuesFile))
		if err != nil {
			t.Fatalf("read %s: %v", valuesFile, err)
		}
		vals = v.AsMap()
	}
	for k, v := range overrides {
		vals[k] = v
	}
	opts := chartutil.ReleaseOptions{Name: "rb", Namespace: "routing", Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(c, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

// decodeAll splits rendered manifests into documents and decodes each one
// strictly into its typed struct. It returns the objects by kind.
func decodeAll(t *testing.T, rendered map[string]string) (map[string][]any, error) {
	t.Helper()
	names := make([]string, 0, len(rendered))
	for n := range rendered {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string][]any{}
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		for i, doc := range strings.Split(rendered[name], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			js, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s #%d: not YAML: %w", name, i, err)
			}
			if string(js) == "null" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := json.Unmarshal(js, &head); err != nil {
				return nil, fmt.Errorf("%s #%d: %w", name, i, err)
			}
			obj, ok := newObject(head.APIVersion, head.Kind)
			if !ok {
				return nil, fmt.Errorf("%s #%d: no typed struct for %s %s", name, i, head.APIVersion, head.Kind)
			}
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				return nil, fmt.Errorf("%s #%d (%s): %w", name, i, head.Kind, err)
			}
			out[head.Kind] = append(out[head.Kind], obj)
		}
	}
	return out, nil
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// dockerfile reads the facts the chart must agree with from the Dockerfile.
func dockerfile(t *testing.T) (port, user, dataDir string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatalf("open Dockerfile: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "EXPOSE":
			port = fields[1]
		case "USER":
			user, _, _ = strings.Cut(fields[1], ":")
		case "VOLUME":
			dataDir = strings.Trim(fields[1], `["]`)
		}
	}
	if port == "" || user == "" || dataDir == "" {
		t.Fatalf("Dockerfile lacks EXPOSE/USER/VOLUME: port=%q user=%q volume=%q", port, user, dataDir)
	}
	return port, user, dataDir
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func TestChartRendersIntoTypedObjects(t *testing.T) {
	c := loadChart(t)
	port, user, dataDir := dockerfile(t)
	for _, tc := range []struct {
		values    string
		wantKinds []string
		postgres  bool
	}{
		{"", []string{"Deployment", "Service", "ServiceAccount", "PersistentVolumeClaim"}, false},
		{"values-production.yaml", []string{"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor"}, true},
	} {
		name := tc.values
		if name == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			rendered, err := render(t, c, tc.values, nil)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			objs, err := decodeAll(t, rendered)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.wantKinds {
				if len(objs[k]) != 1 {
					t.Errorf("got %d %s objects, want 1", len(objs[k]), k)
				}
			}
			if len(objs["Deployment"]) != 1 {
				t.Fatal("no Deployment")
			}
			d := objs["Deployment"][0].(*appsv1.Deployment)
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("containers = %d, want 1", len(pod.Containers))
			}
			ctr := pod.Containers[0]
			if got := fmt.Sprint(ctr.Ports[0].ContainerPort); got != port {
				t.Errorf("containerPort = %s, Dockerfile EXPOSE %s", got, port)
			}
			if addr, _ := envValue(ctr, "ROUTEBALANCE_ADDR"); addr.Value != "0.0.0.0:"+port {
				t.Errorf("ROUTEBALANCE_ADDR = %q, want 0.0.0.0:%s", addr.Value, port)
			}
			if dd, _ := envValue(ctr, "ROUTEBALANCE_DATA_DIR"); dd.Value != dataDir {
				t.Errorf("ROUTEBALANCE_DATA_DIR = %q, Dockerfile VOLUME %q", dd.Value, dataDir)
			}
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsUser == nil || fmt.Sprint(*pod.SecurityContext.RunAsUser) != user {
				t.Errorf("pod runAsUser does not match Dockerfile USER %s", user)
			}
			mounted := false
			for _, m := range ctr.VolumeMounts {
				mounted = mounted || m.MountPath == dataDir
			}
			if !mounted {
				t.Errorf("nothing mounted at the data dir %s (readOnlyRootFilesystem needs it writable)", dataDir)
			}
			if ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("liveness probe not on /healthz: %+v", ctr.LivenessProbe)
			}
			if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("readiness probe not on /readyz: %+v", ctr.ReadinessProbe)
			}
			_, hasDB := envValue(ctr, "ROUTEBALANCE_DATABASE_URL")
			if hasDB != tc.postgres {
				t.Errorf("ROUTEBALANCE_DATABASE_URL present = %v, want %v", hasDB, tc.postgres)
			}
			svc := objs["Service"][0].(*corev1.Service)
			if svc.Spec.Ports[0].TargetPort.String() != "http" || ctr.Ports[0].Name != "http" {
				t.Errorf("service targets %q, container port named %q", svc.Spec.Ports[0].TargetPort.String(), ctr.Ports[0].Name)
			}
			// /metrics is on its own port, which the ServiceMonitor scrapes
			// (issue 16 item 2: never on the public API port).
			if a, _ := envValue(ctr, "ROUTEBALANCE_METRICS_ADDR"); a.Value != "0.0.0.0:9091" || len(ctr.Ports) < 2 || ctr.Ports[1].Name != "metrics" {
				t.Errorf("ROUTEBALANCE_METRICS_ADDR = %q, ports %+v: want 0.0.0.0:9091 on a port named metrics", a.Value, ctr.Ports)
			}
			for _, o := range objs["ServiceMonitor"] {
				if ep := o.(*monitoringv1.ServiceMonitor).Spec.Endpoints; len(ep) != 1 || ep[0].Port != "metrics" {
					t.Errorf("ServiceMonitor endpoints %+v: want the metrics port", ep)
				}
			}
			for k, v := range d.Spec.Selector.MatchLabels {
				if d.Spec.Template.Labels[k] != v || svc.Spec.Selector[k] != v {
					t.Errorf("selector label %s=%s not on the pod template and service", k, v)
				}
			}
		})
	}
}

// TestStrictDecodingCatchesTypos proves the decoder rejects a misspelt
// field, so the test above can fail.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	c := loadChart(t)
	for _, tmpl := range c.Templates {
		if tmpl.Name == "templates/service.yaml" {
			tmpl.Data = bytes.Replace(tmpl.Data, []byte("targetPort:"), []byte("targetPorts:"), 1)
		}
	}
	rendered, err := render(t, c, "", nil)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	_, err = decodeAll(t, rendered)
	if err == nil || !strings.Contains(err.Error(), "targetPorts") {
		t.Fatalf("decode of a misspelt field: err = %v, want an unknown-field error naming targetPorts", err)
	}
}

func TestSQLiteRefusesReplicas(t *testing.T) {
	c := loadChart(t)
	for _, ov := range []map[string]any{
		{"replicaCount": 2},
		{"autoscaling": map[string]any{"enabled": true}},
	} {
		_, err := render(t, c, "", ov)
		if err == nil || !strings.Contains(err.Error(), "needs an external Postgres") {
			t.Errorf("render with %v and no database: err = %v, want the Postgres guard", ov, err)
		}
	}
}

func TestPostgresNeedsSharedKeys(t *testing.T) {
	c := loadChart(t)
	_, err := render(t, c, "", map[string]any{"database": map[string]any{"url": "postgres://rb@db/rb"}})
	if err == nil || !strings.Contains(err.Error(), "same keys") {
		t.Errorf("render with Postgres and no keys: err = %v, want the shared-keys guard", err)
	}
}

func TestDatabaseURLGoesToASecret(t *testing.T) {
	c := loadChart(t)
	rendered, err := render(t, c, "", map[string]any{
		"database":     map[string]any{"url": "postgres://rb@db:5432/rb"},
		"redis":        map[string]any{"url": "redis://:pw@redis:6379/0", "failMode": "closed"},
		"secrets":      map[string]any{"jwtSecret": strings.Repeat("j", 32), "encryptionKey": strings.Repeat("ab", 32)},
		"replicaCount": 2,
	})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	objs, err := decodeAll(t, rendered)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs["Secret"]) != 1 {
		t.Fatalf("secrets = %d, want 1", len(objs["Secret"]))
	}
	s := objs["Secret"][0].(*corev1.Secret)
	if s.StringData["database-url"] != "postgres://rb@db:5432/rb" {
		t.Errorf("database-url in secret = %q", s.StringData["database-url"])
	}
	d := objs["Deployment"][0].(*appsv1.Deployment)
	e, ok := envValue(d.Spec.Template.Spec.Containers[0], "ROUTEBALANCE_DATABASE_URL")
	if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != s.Name {
		t.Errorf("ROUTEBALANCE_DATABASE_URL not read from the secret: %+v", e)
	}
	if len(objs["PersistentVolumeClaim"]) != 0 {
		t.Error("a PVC is rendered although the state lives in Postgres")
	}
	if s.StringData["redis-url"] != "redis://:pw@redis:6379/0" {
		t.Errorf("redis-url in secret = %q", s.StringData["redis-url"])
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	r, ok := envValue(ctr, "ROUTEBALANCE_REDIS_URL")
	if !ok || r.Value != "" || r.ValueFrom == nil || r.ValueFrom.SecretKeyRef.Name != s.Name || r.ValueFrom.SecretKeyRef.Key != "redis-url" {
		t.Errorf("ROUTEBALANCE_REDIS_URL not read from the secret: %+v", r)
	}
	if f, _ := envValue(ctr, "ROUTEBALANCE_REDIS_FAIL"); f.Value != "closed" {
		t.Errorf("ROUTEBALANCE_REDIS_FAIL = %q, want closed", f.Value)
	}
}

// TestReplicasNeedRedis: with Postgres but without Redis the chart refuses
// more than one replica and autoscaling, since every replica would enforce
// rate limits and budgets alone; one replica needs no Redis.
func TestReplicasNeedRedis(t *testing.T) {
	c := loadChart(t)
	pg := map[string]any{
		"database": map[string]any{"url": "postgres://rb@db/rb"},
		"secrets":  map[string]any{"jwtSecret": strings.Repeat("j", 32), "encryptionKey": strings.Repeat("ab", 32)},
	}
	with := func(k string, v any) map[string]any {
		m := map[string]any{k: v}
		for kk, vv := range pg {
			m[kk] = vv
		}
		return m
	}
	for _, ov := range []map[string]any{with("replicaCount", 2), with("autoscaling", map[string]any{"enabled": true})} {
		_, err := render(t, c, "", ov)
		if err == nil || !strings.Contains(err.Error(), "needs Redis") {
			t.Errorf("render with %v and no Redis: err = %v, want the Redis guard", ov, err)
		}
	}
	rendered, err := render(t, c, "", pg)
	if err != nil {
		t.Fatalf("one replica on Postgres without Redis: %v", err)
	}
	objs, err := decodeAll(t, rendered)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := envValue(objs["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0], "ROUTEBALANCE_REDIS_URL"); ok {
		t.Error("ROUTEBALANCE_REDIS_URL set without Redis configured")
	}
	// The production values scale with Redis from an existing Secret.
	rendered, err = render(t, c, "values-production.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err = decodeAll(t, rendered)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := envValue(objs["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0], "ROUTEBALANCE_REDIS_URL")
	if !ok || r.ValueFrom == nil || r.ValueFrom.SecretKeyRef.Name != "routebalance-redis" {
		t.Errorf("production ROUTEBALANCE_REDIS_URL: %+v, want from Secret routebalance-redis", r)
	}
	_, err = render(t, c, "", with("redis", map[string]any{"url": "redis://r:6379", "failMode": "sometimes"}))
	if err == nil || !strings.Contains(err.Error(), "failMode must be open or closed") {
		t.Errorf("failMode sometimes: err = %v", err)
	}
}

// TestOwnerLeaseFromDownwardAPI: with Redis each pod advertises its own IP
// (status.podIP) and name (metadata.name) for the owner lease, POD_IP
// defined before the variable that expands it; without Redis none of it.
func TestOwnerLeaseFromDownwardAPI(t *testing.T) {
	c := loadChart(t)
	rendered, err := render(t, c, "values-production.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(t, rendered)
	if err != nil {
		t.Fatal(err)
	}
	ctr := objs["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	idx := map[string]int{}
	for i, e := range ctr.Env {
		idx[e.Name] = i
	}
	ip, ok := envValue(ctr, "POD_IP")
	if !ok || ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Fatalf("POD_IP: %+v, want the downward API's status.podIP", ip)
	}
	id, ok := envValue(ctr, "ROUTEBALANCE_REPLICA_ID")
	if !ok || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Fatalf("ROUTEBALANCE_REPLICA_ID: %+v, want metadata.name", id)
	}
	u, ok := envValue(ctr, "ROUTEBALANCE_ADVERTISE_URL")
	port := ctr.Ports[0].ContainerPort
	if want := fmt.Sprintf("http://$(POD_IP):%d", port); !ok || u.Value != want {
		t.Fatalf("ROUTEBALANCE_ADVERTISE_URL = %q, want %q", u.Value, want)
	}
	if idx["POD_IP"] > idx["ROUTEBALANCE_ADVERTISE_URL"] {
		t.Error("POD_IP is defined after ROUTEBALANCE_ADVERTISE_URL, so $(POD_IP) would not expand")
	}
	if l, _ := envValue(ctr, "ROUTEBALANCE_OWNER_LEASE"); l.Value != "true" {
		t.Errorf("ROUTEBALANCE_OWNER_LEASE = %q, want true by default", l.Value)
	}
	rendered, err = render(t, c, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err = decodeAll(t, rendered)
	if err != nil {
		t.Fatal(err)
	}
	ctr = objs["Deployment"][0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	for _, name := range []string{"POD_IP", "ROUTEBALANCE_ADVERTISE_URL", "ROUTEBALANCE_OWNER_LEASE"} {
		if _, ok := envValue(ctr, name); ok {
			t.Errorf("%s set without Redis", name)
		}
	}
}
