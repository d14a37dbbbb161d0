package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/routebalance/routebalance/internal/jsonscan"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/tenants"
)

// paramError is a 400 about one input (a body field or a header).
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return e.param + ": " + e.msg }

// badParam is the 400 of param (a body field, "" for the whole body, or
// a header) whose value is wrong; the message names it as OpenAI's do:
// "Invalid 'messages[0].role': must be a non-empty string". The
// wrong-type and missing-field errors have their own wording (typeError,
// missingParam).
func badParam(param, format string, a ...any) *paramError {
	msg := fmt.Sprintf(format, a...)
	if param != "" {
		msg = "Invalid '" + param + "': " + msg
	}
	return &paramError{param: param, msg: msg}
}

// typeError is the 400 of param whose JSON value raw is not of the type
// it must be (want: "an integer", "a boolean" …), in OpenAI's words:
// "Invalid type for 'max_tokens': expected an integer, but got a string
// instead."
func typeError(param, want string, raw []byte) *paramError {
	return &paramError{param: param, msg: "Invalid type for '" + param + "': expected " + want + ", but got " + gotKind(raw) + " instead."}
}

// missingParam is the 400 of a required field that is absent or null.
func missingParam(param string) *paramError {
	return &paramError{param: param, msg: "Missing required parameter: '" + param + "'."}
}

// gotKind names the JSON type of raw for a typeError: "a string", "a
// decimal" (a number that is not an integer), "null" …
func gotKind(raw []byte) string {
	k := jsonscan.KindOf(raw)
	if k == jsonscan.Number && bytes.ContainsAny(raw, ".eE") {
		return "a decimal"
	}
	switch k {
	case jsonscan.Array, jsonscan.Object:
		return "an " + kindName(k)
	case jsonscan.Null:
		return "null"
	}
	return "a " + kindName(k)
}

// quoted is raw (a number) for a message, or "a number out of range" when
// it is too long to repeat.
func quoted(raw []byte) string {
	if len(raw) > 32 {
		return "a number out of range"
	}
	return string(raw)
}

// positiveIntError is the 400 of a max_tokens-like field (an integer in
// [1, 2³¹−1]) whose value raw is not one.
func positiveIntError(param string, raw []byte) *paramError {
	if jsonscan.KindOf(raw) != jsonscan.Number || bytes.ContainsAny(raw, ".eE") {
		return typeError(param, "an integer", raw)
	}
	if raw[0] == '-' || string(raw) == "0" {
		return badParam(param, "integer below minimum value. Expected a value >= 1, but got %s instead.", quoted(raw))
	}
	return badParam(param, "integer above maximum value. Expected a value <= %d, but got %s instead.", math.MaxInt32, quoted(raw))
}

// completionBody is what the handlers read from a chat or text completion
// request; every other field is passed through to the instance untouched.
type completionBody struct {
	fields       *proxy.Body // the client's object, forwarded by splicing
	model        string
	stream       bool
	includeUsage bool
	maxTokens    int
	prompt       string    // text for the estimators
	promptTokens int       // estimated input tokens
	rb           overrides // filled by the handler: headers, then the body's "routebalance"
}

// parseCompletion validates the JSON body of a chat (ep proxy.Chat) or
// text completion (proxy.Completions) request. The body is checked once (json.Valid) and then read
// in place with jsonscan: no member is decoded twice and none is copied
// except the strings routing keeps (model, prompt). The answers are those
// of decoding it with encoding/json (repeated keys: the last one counts).
func parseCompletion(raw []byte, ep proxy.Endpoint) (*completionBody, error) {
	b, err := openBody(raw)
	if err != nil {
		return nil, err
	}
	fields := b.fields
	if b.stream, err = optBool(fields, "stream"); err != nil {
		return nil, err
	}
	if raw, ok := present(fields, "stream_options"); ok {
		if jsonscan.KindOf(raw) != jsonscan.Object {
			return nil, typeError("stream_options", "an object", raw)
		}
		opts := object(raw)
		if b.includeUsage, err = optBool(opts, "include_usage"); err != nil {
			v, _ := present(opts, "include_usage")
			return nil, typeError("stream_options.include_usage", "a boolean", v)
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if k == "max_completion_tokens" && ep != proxy.Chat {
			continue
		}
		n, ok, err := optPositiveInt(fields, k)
		if err != nil {
			return nil, err
		}
		if ok && (b.maxTokens == 0 || n < b.maxTokens) {
			b.maxTokens = n
		}
	}
	if ep == proxy.Chat {
		err = b.parseMessages()
	} else {
		err = b.parsePrompt()
	}
	if err != nil {
		return nil, err
	}
	if err := checkFields(fields, ep); err != nil {
		return nil, err
	}
	return b, nil
}

// jsonContentType reports whether a request's Content-Type header (ct)
// may label its JSON body: absent, application/json or a +json type, with
// any parameters. Any other type (text/plain, multipart/form-data, curl
// -d's application/x-www-form-urlencoded …) is answered 415 before the
// body is read: OpenAI's API does not read such a body as JSON either.
func jsonContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	if mt == "" || strings.EqualFold(mt, "application/json") {
		return true
	}
	typ, sub, ok := strings.Cut(mt, "/")
	return ok && strings.EqualFold(typ, "application") && len(sub) > 5 && strings.EqualFold(sub[len(sub)-5:], "+json")
}

// contentTypeMessage is the 415 of a body that jsonContentType refuses.
const contentTypeMessage = "Invalid 'Content-Type' header: the request body must be JSON; send Content-Type: application/json"

// openBody checks that raw is one JSON object (whitespace around it
// allowed) and reads its required model, a non-empty string: the start of
// every inference body's parser. Errors are 400 parameter errors.
func openBody(raw []byte) (*completionBody, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, badParam("", "the request body is empty; send a JSON object")
	}
	if raw[0] != '{' {
		return nil, badParam("", "the request body must be a JSON object")
	}
	fields, err := proxy.NewBody(raw)
	if err != nil {
		return nil, &paramError{param: "", msg: "could not parse the JSON body: " + jsonErrText(err)}
	}
	b := &completionBody{fields: fields}
	if b.model, err = reqString(fields, "model"); err != nil {
		return nil, err
	}
	return b, nil
}

// jsonErrText says where JSON went wrong without echoing the body.
func jsonErrText(err error) string {
	if se, ok := err.(*json.SyntaxError); ok {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

// members is a JSON object whose members can be looked up: the request
// body (*proxy.Body) or a nested object (object).
type members interface {
	Get(key string) (json.RawMessage, bool)
}

// object is a nested JSON object of a checked body.
type object []byte

// Get returns the value of the last member named key.
func (o object) Get(key string) (json.RawMessage, bool) { return jsonscan.Get(o, key) }

// present returns a field unless it is missing or null.
func present[M members](f M, k string) (json.RawMessage, bool) {
	raw, ok := f.Get(k)
	if !ok || jsonscan.IsNull(raw) {
		return nil, false
	}
	return raw, true
}

// jsonString returns the JSON string value raw as a Go string, decoded as
// encoding/json decodes it; ok is false for any other kind. Plain strings
// (no escapes, valid UTF-8) are copied once, escaped ones decoded into
// one new string.
func jsonString(raw []byte) (string, bool) {
	if jsonscan.KindOf(raw) != jsonscan.String {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if jsonscan.Simple(in) {
		if string(in) == "auto" { // the usual model: no copy
			return "auto", true
		}
		return string(in), true
	}
	b, ok := jsonscan.AppendUnquoted(make([]byte, 0, len(in)), in)
	return string(b), ok
}

func reqString[M members](f M, k string) (string, error) {
	raw, ok := present(f, k)
	if !ok {
		return "", missingParam(k)
	}
	s, ok := jsonString(raw)
	if !ok {
		return "", typeError(k, "a string", raw)
	}
	if s == "" {
		return "", badParam(k, "empty string. Expected a non-empty string.")
	}
	return s, nil
}

// nonEmptyString reports whether member k is a non-empty string, without
// copying it (the roles and part types are checked, not kept).
func nonEmptyString[M members](f M, k string) bool {
	raw, ok := present(f, k)
	return ok && jsonscan.KindOf(raw) == jsonscan.String && len(raw) > 2
}

func optBool[M members](f M, k string) (bool, error) {
	raw, ok := present(f, k)
	if !ok {
		return false, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, typeError(k, "a boolean", raw)
}

func optPositiveInt[M members](f M, k string) (int, bool, error) {
	raw, ok := present(f, k)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil || n < 1 {
		return 0, false, positiveIntError(k, raw)
	}
	return int(n), true, nil
}

// textPart is one piece of prompt text: a JSON string's body (between
// its quotes), decoded when it is not plain.
type textPart struct {
	raw   []byte
	plain bool
}

func (b *completionBody) parseMessages() error {
	raw, ok := present(b.fields, "messages")
	if !ok {
		return missingParam("messages")
	}
	if jsonscan.KindOf(raw) != jsonscan.Array {
		return typeError("messages", "an array of message objects", raw)
	}
	var partBuf [16]textPart
	parts := partBuf[:0]
	n := 0
	msgs := jsonscan.Elements(raw)
	for i := 0; ; i++ {
		m, ok := msgs.NextElement()
		if !ok {
			break
		}
		n++
		if jsonscan.KindOf(m) != jsonscan.Object {
			return typeError(messageParam(i, ""), "an object", m)
		}
		msg := object(m)
		if !nonEmptyString(msg, "role") {
			return badParam(messageParam(i, ".role"), "must be a non-empty string")
		}
		content, ok := present(msg, "content")
		if !ok {
			continue // assistant tool calls carry no content
		}
		switch jsonscan.KindOf(content) {
		case jsonscan.String:
			parts = appendText(parts, content)
			continue
		case jsonscan.Array:
		default:
			return contentError(messageParam(i, ".content"), content)
		}
		// encoding/json refused the whole array unless every part is an
		// object (or null) before it looked at any part's fields.
		all := jsonscan.Elements(content)
		for {
			p, ok := all.NextElement()
			if !ok {
				break
			}
			if k := jsonscan.KindOf(p); k != jsonscan.Object && k != jsonscan.Null {
				return contentError(messageParam(i, ".content"), content)
			}
		}
		ps := jsonscan.Elements(content)
		for j := 0; ; j++ {
			p, ok := ps.NextElement()
			if !ok {
				break
			}
			part := object(p)
			if jsonscan.IsNull(p) {
				part = object("{}")
			}
			typ, ok := present(part, "type")
			if !ok || jsonscan.KindOf(typ) != jsonscan.String || len(typ) == 2 {
				return badParam(fmt.Sprintf("%s.content[%d].type", messageParam(i, ""), j), "must be a non-empty string")
			}
			if !isText(typ) {
				continue // images and audio do not feed the text estimators
			}
			t, ok := present(part, "text")
			if !ok || jsonscan.KindOf(t) != jsonscan.String || len(t) == 2 {
				return badParam(fmt.Sprintf("%s.content[%d].text", messageParam(i, ""), j), "must be a string")
			}
			parts = appendText(parts, t)
		}
	}
	if n == 0 {
		return badParam("messages", "empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	b.prompt = joinText(parts)
	// routing's one estimate (the simulator's and the emulator's): the
	// text, plus the chat template's tokens per message and the priming
	// tokens; for one message it is routing.EstimateChatTokens exactly.
	b.promptTokens = routing.EstimateTokens(b.prompt) + routing.ChatTemplateTokens*n + routing.ChatPrimingTokens
	return nil
}

// isText reports whether a part's type (a JSON string) decodes to "text".
func isText(typ []byte) bool {
	if string(typ) == `"text"` {
		return true
	}
	s, ok := jsonString(typ)
	return ok && s == "text"
}

// contentError is the 400 of a message's content that is neither a string
// nor an array of content part objects.
func contentError(param string, content []byte) *paramError {
	if jsonscan.KindOf(content) == jsonscan.Array {
		return badParam(param, "must be a string or an array of content part objects; an element of the array is not an object")
	}
	return typeError(param, "a string or an array of content parts", content)
}

func messageParam(i int, suffix string) string { return "messages[" + strconv.Itoa(i) + "]" + suffix }

// appendText adds a JSON string value to the prompt's parts unless it is
// empty.
func appendText(parts []textPart, s []byte) []textPart {
	in := s[1 : len(s)-1]
	if len(in) == 0 {
		return parts
	}
	return append(parts, textPart{raw: in, plain: jsonscan.Simple(in)})
}

// joinText returns the parts' text joined by newlines, in one allocation.
func joinText(parts []textPart) string {
	if len(parts) == 0 {
		return ""
	}
	if len(parts) == 1 && parts[0].plain {
		return string(parts[0].raw)
	}
	size := len(parts) - 1
	for _, p := range parts {
		size += len(p.raw) // decoding only shortens (but for invalid UTF-8: append grows then)
	}
	out := make([]byte, 0, size)
	for k, p := range parts {
		if k > 0 {
			out = append(out, '\n')
		}
		if p.plain {
			out = append(out, p.raw...)
			continue
		}
		out, _ = jsonscan.AppendUnquoted(out, p.raw) // valid: the body passed json.Valid
	}
	return unsafe.String(unsafe.SliceData(out), len(out))
}

func (b *completionBody) parsePrompt() error {
	raw, ok := present(b.fields, "prompt")
	if !ok {
		return missingParam("prompt")
	}
	if s, ok := jsonString(raw); ok {
		b.prompt, b.promptTokens = s, routing.EstimateTokens(s)
		return nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		var text strings.Builder
		for _, p := range ss {
			appendPrompt(&text, p)
			b.promptTokens += routing.EstimateTokens(p)
		}
		b.prompt = text.String()
		return nil
	}
	// Token-id prompts: counted exactly, no text for the estimators.
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		b.promptTokens = len(ids)
		return nil
	}
	var batches [][]uint32
	if json.Unmarshal(raw, &batches) == nil && len(batches) > 0 {
		for _, ids := range batches {
			b.promptTokens += len(ids)
		}
		return nil
	}
	return badParam("prompt", "must be a string, an array of strings, or an array of token ids")
}

func appendPrompt(sb *strings.Builder, s string) {
	if s == "" {
		return
	}
	if sb.Len() > 0 {
		sb.WriteByte('\n')
	}
	sb.WriteString(s)
}

// overrides are a request's own routing options, from X-RouteBalance-*
// headers and the body's "routebalance" object (the body wins when both
// set the same option).
type overrides struct {
	preset     string
	weights    *routing.Weights
	priority   *routing.Priority
	workflow   string
	budgetUSD  float64
	ttft, tpot time.Duration
	policy     string
	targets    *autopilot.Targets // routebalance.autopilot / X-RouteBalance-Autopilot
}

// rbBody is the JSON form of the "routebalance" body object.
type rbBody struct {
	Preset    *string         `json:"preset"`
	Weights   json.RawMessage `json:"weights"`
	Priority  *string         `json:"priority"`
	Workflow  *string         `json:"workflow"`
	BudgetUSD *float64        `json:"budget_usd"`
	TTFTMs    *float64        `json:"ttft_slo_ms"`
	TPOTMs    *float64        `json:"tpot_slo_ms"`
	Policy    *string         `json:"policy"`
	Autopilot json.RawMessage `json:"autopilot"`
}

func (o *overrides) parseBody(raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var rb rbBody
	if err := dec.Decode(&rb); err != nil {
		return badParam("routebalance", "must be an object with preset, weights, priority, workflow, budget_usd, ttft_slo_ms, tpot_slo_ms, policy, autopilot: %s", jsonErrText(err))
	}
	if err := o.parseTargetsBody(rb.Autopilot); err != nil {
		return err
	}
	if rb.Preset != nil {
		if err := o.setPreset("routebalance.preset", *rb.Preset); err != nil {
			return err
		}
	}
	if len(rb.Weights) > 0 && string(rb.Weights) != "null" {
		var w routing.Weights
		var s string
		switch {
		case json.Unmarshal(rb.Weights, &s) == nil:
			var err error
			if w, err = routing.ParseWeights(s); err != nil {
				return badParam("routebalance.weights", "%s", fieldMsg(err))
			}
		default:
			d := json.NewDecoder(bytes.NewReader(rb.Weights))
			d.DisallowUnknownFields()
			if err := d.Decode(&w); err != nil {
				return badParam("routebalance.weights", "must be {\"quality\":q,\"cost\":c,\"latency\":l} or \"quality=q,cost=c,latency=l\"")
			}
			if err := w.Validate(); err != nil {
				return badParam("routebalance.weights", "%s", fieldMsg(err))
			}
		}
		o.weights = &w
	}
	if rb.Priority != nil {
		if err := o.setPriority("routebalance.priority", *rb.Priority); err != nil {
			return err
		}
	}
	if rb.Workflow != nil {
		if err := o.setWorkflow("routebalance.workflow", *rb.Workflow); err != nil {
			return err
		}
	}
	if rb.BudgetUSD != nil {
		if err := o.setBudget("routebalance.budget_usd", *rb.BudgetUSD); err != nil {
			return err
		}
	}
	if rb.TTFTMs != nil {
		if err := setMs(&o.ttft, "routebalance.ttft_slo_ms", *rb.TTFTMs); err != nil {
			return err
		}
	}
	if rb.TPOTMs != nil {
		if err := setMs(&o.tpot, "routebalance.tpot_slo_ms", *rb.TPOTMs); err != nil {
			return err
		}
	}
	if rb.Policy != nil {
		if err := o.setPolicy("routebalance.policy", *rb.Policy); err != nil {
			return err
		}
	}
	return nil
}

// Request headers that override routing per request.
const (
	hdrPreset   = "X-RouteBalance-Preset"
	hdrWeights  = "X-RouteBalance-Weights"
	hdrPriority = "X-RouteBalance-Priority"
	hdrWorkflow = "X-RouteBalance-Workflow"
	hdrBudget   = "X-RouteBalance-Budget-USD"
	hdrTTFT     = "X-RouteBalance-TTFT-SLO-Ms"
	hdrTPOT     = "X-RouteBalance-TPOT-SLO-Ms"
	hdrPolicy   = "X-RouteBalance-Policy"
)

// parseHeaders reads the X-RouteBalance-* request headers into o; get
// returns a header's value ("" when absent). Body values parsed later
// overwrite them.
func (o *overrides) parseHeaders(get func(string) string) error {
	if v := strings.TrimSpace(get(hdrPreset)); v != "" {
		if err := o.setPreset(hdrPreset, v); err != nil {
			return err
		}
	}
	if v := strings.TrimSpace(get(hdrWeights)); v != "" {
		w, err := routing.ParseWeights(v)
		if err != nil {
			return badParam(hdrWeights, "%s", fieldMsg(err))
		}
		o.weights = &w
	}
	if v := strings.TrimSpace(get(hdrPriority)); v != "" {
		if err := o.setPriority(hdrPriority, v); err != nil {
			return err
		}
	}
	if v := strings.TrimSpace(get(hdrWorkflow)); v != "" {
		if err := o.setWorkflow(hdrWorkflow, v); err != nil {
			return err
		}
	}
	if v := strings.TrimSpace(get(hdrBudget)); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return badParam(hdrBudget, "must be a number of US dollars, got %q", v)
		}
		if err := o.setBudget(hdrBudget, f); err != nil {
			return err
		}
	}
	for _, h := range []struct {
		name string
		dst  *time.Duration
	}{{hdrTTFT, &o.ttft}, {hdrTPOT, &o.tpot}} {
		v := strings.TrimSpace(get(h.name))
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return badParam(h.name, "must be a number of milliseconds, got %q", v)
		}
		if err := setMs(h.dst, h.name, f); err != nil {
			return err
		}
	}
	if v := strings.TrimSpace(get(hdrPolicy)); v != "" {
		if err := o.setPolicy(hdrPolicy, v); err != nil {
			return err
		}
	}
	if v := strings.TrimSpace(get(hdrAutopilot)); v != "" {
		if err := o.setTargets(hdrAutopilot, v); err != nil {
			return err
		}
	}
	return nil
}

func fieldMsg(err error) string {
	if fe, ok := err.(*routing.FieldError); ok {
		return fe.Msg
	}
	return err.Error()
}

func (o *overrides) setPreset(param, v string) error {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == routing.PresetCustom || v == autopilot.PresetAutopilot {
		o.preset = v
		return nil
	}
	if _, err := routing.PresetWeights(v); err != nil {
		return badParam(param, "must be quality, latency, cost, balanced, custom or autopilot, got %q", v)
	}
	o.preset = v
	return nil
}

func (o *overrides) setPriority(param, v string) error {
	p, err := routing.ParsePriority(strings.ToLower(strings.TrimSpace(v)))
	if err != nil {
		return badParam(param, "must be high, normal or low, got %q", v)
	}
	o.priority = &p
	return nil
}

const maxWorkflowLen = 256

func (o *overrides) setWorkflow(param, v string) error {
	if len(v) > maxWorkflowLen || !utf8.ValidString(v) {
		return badParam(param, "must be valid UTF-8 of at most %d bytes", maxWorkflowLen)
	}
	o.workflow = v
	return nil
}

func (o *overrides) setBudget(param string, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return badParam(param, "must be a number of US dollars >= 0")
	}
	o.budgetUSD = f
	return nil
}

func setMs(dst *time.Duration, param string, ms float64) error {
	if math.IsNaN(ms) || math.IsInf(ms, 0) || ms < 0 || ms > 24*3600*1000 {
		return badParam(param, "must be a number of milliseconds >= 0")
	}
	*dst = time.Duration(ms * float64(time.Millisecond))
	return nil
}

func (o *overrides) setPolicy(param, v string) error {
	v = strings.ToLower(strings.TrimSpace(v))
	if !routing.IsLivePolicy(v) { // "oracle" reads true labels: simulation only
		return badParam(param, "must be one of %s; got %q", strings.Join(routing.LivePolicies(), ", "), v)
	}
	o.policy = v
	return nil
}

// resolveWeights applies the order request → API key → tenant default →
// balanced. At each level explicit weights win over a named preset; a
// "custom" preset without weights falls through to the next level.
func resolveWeights(o *overrides, p *tenants.Principal) (routing.Weights, error) {
	if o.weights != nil {
		return *o.weights, nil
	}
	if o.preset != "" && o.preset != routing.PresetCustom {
		return routing.PresetWeights(o.preset)
	}
	if o.preset == routing.PresetCustom {
		return routing.Weights{}, badParam("preset", "custom needs weights (X-RouteBalance-Weights or routebalance.weights)")
	}
	if w, ok := levelWeights(p.Key.Preset, p.Key.Weights); ok {
		return w, nil
	}
	if w, ok := levelWeights(p.Settings.Preset, &p.Settings.Weights); ok {
		return w, nil
	}
	return routing.PresetWeights(routing.PresetBalanced)
}

// levelWeights reads one level's preset and weights; stored values were
// validated on the way in, but a bad one falls through rather than fail.
func levelWeights(preset string, w *routing.Weights) (routing.Weights, bool) {
	if (preset == "" || preset == routing.PresetCustom) && w != nil && *w != (routing.Weights{}) && w.Validate() == nil {
		return *w, true
	}
	if preset != "" && preset != routing.PresetCustom {
		if pw, err := routing.PresetWeights(preset); err == nil {
			return pw, true
		}
	}
	return routing.Weights{}, false
}

// resolveSLO applies request → key → tenant per field.
func resolveSLO(o *overrides, p *tenants.Principal) routing.SLO {
	slo := p.Settings.SLO.Routing()
	if p.Key.SLO != nil {
		k := p.Key.SLO.Routing()
		if k.TTFT > 0 {
			slo.TTFT = k.TTFT
		}
		if k.TPOT > 0 {
			slo.TPOT = k.TPOT
		}
		if k.E2E > 0 {
			slo.E2E = k.E2E
		}
		if k.MaxCostUSD > 0 {
			slo.MaxCostUSD = k.MaxCostUSD
		}
	}
	if o.ttft > 0 {
		slo.TTFT = o.ttft
	}
	if o.tpot > 0 {
		slo.TPOT = o.tpot
	}
	return slo
}
