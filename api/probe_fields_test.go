package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/routing/quality"
	qualitysql "github.com/routebalance/routebalance/routing/quality/sqlstore"
	"github.com/routebalance/routebalance/tenants"
)

// TestProbeWrongTypedFieldsAreRefused: fields of the wrong JSON type
// ("temperature": "hot", "n": 1.5 …) were relayed to the instance
// unchecked, and its answer (or failure) came back. The gateway checks
// the OpenAI fields it knows: 400 invalid_request_error with the field in
// param, and nothing reaches the instance.
func TestProbeWrongTypedFieldsAreRefused(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}],` + extra + `}`
	}
	text := func(extra string) string { return `{"model":"m","prompt":"hi",` + extra + `}` }
	for _, tc := range []struct {
		path, body, param string
	}{
		{"/v1/chat/completions", chat(`"temperature":"hot"`), "temperature"},
		{"/v1/chat/completions", chat(`"temperature":-1`), "temperature"},
		{"/v1/chat/completions", chat(`"max_tokens":"10"`), "max_tokens"},
		{"/v1/chat/completions", chat(`"stream":"yes"`), "stream"},
		{"/v1/chat/completions", chat(`"n":1.5`), "n"},
		{"/v1/chat/completions", chat(`"n":0`), "n"},
		{"/v1/chat/completions", chat(`"top_p":2`), "top_p"},
		{"/v1/chat/completions", chat(`"presence_penalty":"x"`), "presence_penalty"},
		{"/v1/chat/completions", chat(`"frequency_penalty":3`), "frequency_penalty"},
		{"/v1/chat/completions", chat(`"seed":"42"`), "seed"},
		{"/v1/chat/completions", chat(`"stop":[1]`), "stop"},
		{"/v1/chat/completions", chat(`"user":7`), "user"},
		{"/v1/chat/completions", chat(`"logit_bias":{"50256":"ban"}`), "logit_bias"},
		{"/v1/chat/completions", chat(`"logprobs":1`), "logprobs"},
		{"/v1/chat/completions", chat(`"top_logprobs":true`), "top_logprobs"},
		{"/v1/chat/completions", chat(`"tools":{"type":"function"}`), "tools"},
		{"/v1/chat/completions", chat(`"tool_choice":1`), "tool_choice"},
		{"/v1/chat/completions", chat(`"response_format":"json"`), "response_format"},
		{"/v1/chat/completions", chat(`"parallel_tool_calls":"no"`), "parallel_tool_calls"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":7}]}`, "messages[0].content"},
		{"/v1/completions", text(`"logprobs":true`), "logprobs"},
		{"/v1/completions", text(`"echo":"yes"`), "echo"},
		{"/v1/completions", text(`"best_of":0.5`), "best_of"},
		{"/v1/completions", text(`"suffix":[]`), "suffix"},
		{"/v1/completions", text(`"temperature":{}`), "temperature"},
	} {
		res, raw := e.post(t, tc.path, testKey, tc.body, nil)
		env := decodeEnvelope(t, raw)
		// (max_tokens, stream and content were checked before; their
		// messages do not repeat the param)
		named := strings.Contains(env.Error.Message, tc.param) || tc.param == "max_tokens" || tc.param == "stream" || strings.HasPrefix(tc.param, "messages")
		if res.StatusCode != http.StatusBadRequest || env.Error.Type != typeInvalidRequest || str(env.Error.Param) != tc.param || !named {
			t.Errorf("%s %s: %d %s, want 400 invalid_request_error with param %q named in the message", tc.path, tc.body, res.StatusCode, raw, tc.param)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("%d refused requests reached the instance", n)
	}

	// The same fields well typed (null counts as absent) are relayed.
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", chat(`"temperature":0.7,"top_p":1,"n":1,"seed":-3,"stop":["\n"],"user":"u","logit_bias":{"5":-100},` +
			`"logprobs":true,"top_logprobs":2,"presence_penalty":-2,"frequency_penalty":null,"tools":[{"type":"function","function":{"name":"f"}}],` +
			`"tool_choice":"auto","response_format":{"type":"json_object"},"parallel_tool_calls":false,"top_k":5`)},
		{"/v1/completions", text(`"temperature":2.5,"logprobs":3,"echo":false,"best_of":2,"suffix":"s","stop":"x"`)},
	} {
		if res, raw := e.post(t, tc.path, testKey, tc.body, nil); res.StatusCode != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", tc.path, tc.body, res.StatusCode, raw)
		}
	}
	if n := len(up.Requests()); n != 2 {
		t.Errorf("%d requests reached the instance, want the 2 valid ones", n)
	}

	// The official SDK sees the field in the error's param.
	c := e.client()
	_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, BestOf: openai.Int(0),
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "best_of" {
		t.Errorf("SDK best_of 0: %v, want 400 with param best_of", err)
	}
}

// TestProbeDisabledModelSaysSo: a request for a model whose instances the
// owner disabled was answered 503 no_healthy_instance, as if the engines
// were down. It is 403 model_disabled (OpenAI's status for a model the
// project may not use), naming the model and what is enabled.
func TestProbeDisabledModelSaysSo(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	off := inst("i1", up.URL, "big")
	off.Disabled = true
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{off, inst("i2", up.URL, "m")}})
	res, raw := e.post(t, "/v1/chat/completions", testKey, `{"model":"big","messages":[{"role":"user","content":"hi"}]}`, nil)
	env := decodeEnvelope(t, raw)
	if res.StatusCode != http.StatusForbidden || str(env.Error.Code) != errCodeModelDisabled || str(env.Error.Param) != "model" ||
		!strings.Contains(env.Error.Message, "`big` is disabled by the cluster's owner") || !strings.Contains(env.Error.Message, "enabled: m") {
		t.Errorf("disabled model: %d %s, want 403 model_disabled saying big is disabled and m is enabled", res.StatusCode, raw)
	}
	if res, raw := e.post(t, "/v1/chat/completions", testKey, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); res.StatusCode != 200 {
		t.Errorf("enabled model: %d %s", res.StatusCode, raw)
	}
	if res, raw := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil); res.StatusCode != 200 {
		t.Errorf("auto with one enabled model: %d %s", res.StatusCode, raw)
	}

	// Every instance disabled: auto says so too.
	on := inst("i2", up.URL, "m")
	on.Disabled = true
	e = newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{off, on}})
	c := e.client()
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || apiErr.Code != errCodeModelDisabled ||
		!strings.Contains(apiErr.Message, "disabled by the cluster's owner") {
		t.Errorf("auto, every instance disabled: %v, want 403 model_disabled", err)
	}
}

// TestProbeLongHeadersAreServed: a request whose headers passed 4 KiB (a
// long cookie or bearer token) failed with fasthttp's terse "Request
// Header Fields Too Large". The limit is Config.MaxHeaderBytes (default
// 16 KiB, --max-header-bytes): below it the request is served, above it
// the answer is 431 headers_too_large stating the limit.
func TestProbeLongHeadersAreServed(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	get := func(cookie int) (int, string) {
		req, _ := http.NewRequest("GET", e.url+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Cookie", "session="+strings.Repeat("c", cookie))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("cookie of %d bytes: %v", cookie, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}
	if code, raw := get(12 << 10); code != http.StatusOK {
		t.Errorf("12 KiB cookie: %d %s, want 200", code, raw)
	}
	code, raw := get(20 << 10)
	env := decodeEnvelope(t, raw)
	if code != http.StatusRequestHeaderFieldsTooLarge || str(env.Error.Code) != "headers_too_large" || !strings.Contains(env.Error.Message, "16384 bytes") {
		t.Errorf("20 KiB cookie: %d %s, want 431 headers_too_large stating the 16384-byte limit", code, raw)
	}
}

// rawDo sends body as it is (not JSON-encoded) over the network.
func rawDo(t *testing.T, method, url, token, body string) resp {
	t.Helper()
	return httpSend(t, method, url, token, strings.NewReader(body))
}

// TestProbeDisabledJudgeModelIsChecked: PUT quality-judge with enabled
// false saved any model ("no-such-model"), which the owner could then not
// enable. The model is checked even when disabled: a chat model of the
// cluster (its instance may be disabled), none, or the one already saved.
func TestProbeDisabledJudgeModelIsChecked(t *testing.T) {
	db := dbtest.SQLite(t)
	j := quality.NewJudge(quality.JudgeConfig{}, quality.JudgeDeps{Store: qualitysql.NewSQLite(db), Learner: nopLearner{}})
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: db}, true, func(d *Deps) { d.QualityJudge = j })
	base := serveLoopback(t, e)
	_, tok := signupTok(e, "judge-probe@example.com")
	cid := mkCluster(t, e, tok, "prod")
	var big string
	for _, in := range []map[string]any{
		{"base_url": "http://127.0.0.1:9", "model": "big", "gpu": "L4"},
		{"base_url": "http://127.0.0.1:9", "model": "emb", "gpu": "L4", "kind": "embedding"},
	} {
		r := httpDo(t, "POST", base+"/api/v1/clusters/"+cid+"/instances", tok, in)
		if r.status != 201 {
			t.Fatalf("instance: %d %s", r.status, r.raw)
		}
		if in["model"] == "big" {
			big = r.str("id")
		}
	}
	path := base + "/api/v1/clusters/" + cid + "/quality-judge"
	put := func(enabled bool, model string) resp {
		return httpDo(t, "PUT", path, tok, map[string]any{"enabled": enabled, "model": model, "sample_rate": 0.2, "monthly_budget_usd": 5})
	}
	for _, m := range []string{"no-such-model", "emb"} {
		r := put(false, m)
		if errObj, _ := r.body["error"].(map[string]any); r.status != 400 || errObj["param"] != "model" || errObj["type"] != typeInvalidRequest ||
			!strings.Contains(r.raw, "its chat models: big") {
			t.Errorf("disabled judge with model %q: %d %s, want 400 naming model and listing big", m, r.status, r.raw)
		}
	}
	if r := httpDo(t, "GET", path, tok, nil); strings.Contains(r.raw, "no-such-model") {
		t.Errorf("the refused model was saved: %s", r.raw)
	}
	for _, m := range []string{"", "big"} {
		if r := put(false, m); r.status != 200 {
			t.Errorf("disabled judge with model %q: %d %s, want 200", m, r.status, r.raw)
		}
	}
	if r := put(true, "big"); r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.raw)
	}
	// The judge's instance disabled: it can no longer be enabled, but it
	// can still be turned off with its saved model.
	if r := httpDo(t, "PATCH", base+"/api/v1/clusters/"+cid+"/instances/"+big, tok, map[string]any{"disabled": true}); r.status != 200 {
		t.Fatalf("disable the instance: %d %s", r.status, r.raw)
	}
	if r := put(true, "big"); r.status != 400 {
		t.Errorf("enable on a disabled instance: %d %s, want 400", r.status, r.raw)
	}
	if r := httpDo(t, "DELETE", base+"/api/v1/clusters/"+cid+"/instances/"+big, tok, nil); r.status != 204 {
		t.Fatalf("delete the instance: %d %s", r.status, r.raw)
	}
	if r := put(false, "big"); r.status != 200 {
		t.Errorf("turn off the judge whose instance is gone, same model: %d %s, want 200", r.status, r.raw)
	}
}

// TestProbeUploadRepeatedIDsRefused: a labelled-data upload with the same
// id on two lines was stored as two labels of one prompt. It is 400
// invalid_lines, each repeat listed with its line and the line the id
// first came on, and nothing is stored.
func TestProbeUploadRepeatedIDsRefused(t *testing.T) {
	db := dbtest.SQLite(t)
	qs, err := quality.New(quality.Config{}, quality.Deps{Persist: qualitysql.NewSQLite(db)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); qs.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: db}, true, func(d *Deps) { d.QualityData = qs })
	base := serveLoopback(t, e)
	_, tok := signupTok(e, "upload-probe@example.com")
	cid := mkCluster(t, e, tok, "prod")
	for _, m := range []string{"big", "small"} {
		if r := httpDo(t, "POST", base+"/api/v1/clusters/"+cid+"/instances", tok, map[string]any{"base_url": "http://127.0.0.1:9", "model": m, "gpu": "L4"}); r.status != 201 {
			t.Fatalf("instance: %d %s", r.status, r.raw)
		}
	}
	path := base + "/api/v1/clusters/" + cid + "/quality-data"
	body := qualityLines(4) + `{"id":"r1","prompt":"a poem about the sea number 1","scores":{"big":0}}` + "\n" + qualityLines(3)
	r := rawDo(t, "POST", path, tok, body)
	errObj, _ := r.body["error"].(map[string]any)
	if r.status != 400 || errObj["code"] != "invalid_lines" || !strings.Contains(r.raw, `"line":5,"message":"id \"r1\" repeats line 2`) ||
		!strings.Contains(r.raw, `"line":6,"message":"id \"r0\" repeats line 1`) || r.body["error_count"] != float64(4) {
		t.Errorf("upload with repeated ids: %d %s, want 400 invalid_lines listing lines 5–8", r.status, r.raw)
	}
	if r := httpDo(t, "GET", path, tok, nil); !strings.Contains(r.raw, `"status":"none"`) {
		t.Errorf("after the refused upload: %s, want nothing stored", r.raw)
	}
	if r := rawDo(t, "POST", path, tok, qualityLines(6)); r.status != http.StatusAccepted {
		t.Errorf("unique ids: %d %s, want 202", r.status, r.raw)
	}
}
