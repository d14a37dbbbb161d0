package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

func doReq(t testing.TB, method, url, token, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// TestServeClusterQualityData runs serve with no operator-wide index: a
// completion routes on priors; an upload for the cluster's two models
// makes the decision, the response header and /state say "cluster"; the
// data survives a restart; feedback joins the cluster's store.
func TestServeClusterQualityData(t *testing.T) {
	big := vllmtest.New(t, vllmtest.Config{Model: "big"})
	small := vllmtest.New(t, vllmtest.Config{Model: "small"})
	dir := t.TempDir()
	base, stop := startServe(t, dir, "--allow-private-endpoints")
	tok := postJSON(t, base+"/api/v1/signup", "", `{"email":"q@example.com","password":"correct-horse-42","name":"Q"}`)["access_token"].(string)
	cid := postJSON(t, base+"/api/v1/clusters", tok, `{"name":"c"}`)["id"].(string)
	for m, up := range map[string]*vllmtest.Server{"big": big, "small": small} {
		postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", tok, `{"base_url":"`+up.URL+`","model":"`+m+`","gpu":"l4"}`)
	}
	key := postJSON(t, base+"/api/v1/keys", tok, `{"name":"k"}`)["key"].(string)
	complete := func() *http.Response {
		res, body := doReq(t, "POST", base+"/v1/chat/completions", key, `{"model":"auto","messages":[{"role":"user","content":"a poem about the sea number 7"}]}`)
		if res.StatusCode != 200 {
			t.Fatalf("completion: %d %s", res.StatusCode, body)
		}
		return res
	}
	if src := complete().Header.Get("X-RouteBalance-Quality-Source"); src != "prior" {
		t.Errorf("quality source before an upload = %q, want prior", src)
	}

	qd := base + "/api/v1/clusters/" + cid + "/quality-data"
	if res, body := doReq(t, "POST", qd, tok, mathPoemUpload(300)); res.StatusCode != 202 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	ready := func() string {
		var body string
		testwait.Until(t, "cluster index built", func() bool {
			_, body = doReq(t, "GET", qd, tok, "")
			return strings.Contains(body, `"status":"ready"`)
		})
		return body
	}
	status := ready()
	res := complete()
	if src, model := res.Header.Get("X-RouteBalance-Quality-Source"), res.Header.Get("X-RouteBalance-Model"); src != "cluster" || model != "small" {
		t.Errorf("after the upload: source %q model %q, want cluster and small (the poem model)", src, model)
	}
	_, st := doReq(t, "GET", base+"/api/v1/clusters/"+cid+"/state", tok, "")
	if strings.Count(st, `"estimate_source":"cluster"`) != 2 {
		t.Errorf("/state: %s, want both models' estimates from the cluster", st)
	}

	// Feedback on the last request joins the cluster's store.
	if res, body := doReq(t, "POST", base+"/v1/feedback", key, `{"request_id":"`+res.Header.Get("X-Request-Id")+`","score":1}`); res.StatusCode != 200 {
		t.Fatalf("feedback: %d %s", res.StatusCode, body)
	}
	if _, body := doReq(t, "GET", qd, tok, ""); !strings.Contains(body, `"online_labels":{"small":1}`) {
		t.Errorf("status after feedback: %s, want one online label of small", body)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	base, stop = startServe(t, dir, "--allow-private-endpoints")
	defer stop() //nolint:errcheck
	qd = base + "/api/v1/clusters/" + cid + "/quality-data"
	after := ready()
	var before, again struct {
		Data struct {
			Records    int            `json:"records"`
			Indexed    int            `json:"indexed"`
			Models     map[string]int `json:"models"`
			UploadedAt string         `json:"uploaded_at"`
			AUC        float64        `json:"validation_auc"`
		} `json:"data"`
	}
	json.Unmarshal([]byte(status), &before) //nolint:errcheck
	json.Unmarshal([]byte(after), &again)   //nolint:errcheck
	if before.Data.Records != 300 || fmt.Sprint(before) != fmt.Sprint(again) {
		t.Errorf("after restart %+v, before %+v", again.Data, before.Data)
	}
	if src := complete().Header.Get("X-RouteBalance-Quality-Source"); src != "cluster" {
		t.Errorf("quality source after restart = %q, want cluster", src)
	}
}
