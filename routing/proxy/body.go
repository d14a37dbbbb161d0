package proxy

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/routebalance/routebalance/internal/jsonscan"
)

// Body is a client's JSON request object as it arrived: its own copy of
// the bytes, checked once by NewBody and never decoded as a whole. Open
// rewrites it for the instance by splicing members (served model, usage
// on streams, the max_tokens clamp, "routebalance" removed) instead of
// re-encoding, so the forwarded body keeps the client's member order and
// formatting. A Body is immutable and safe for concurrent reads.
type Body struct {
	raw     []byte
	members []span // the object's members in order, found once
	inline  [12]span
}

// ErrNotObject is NewBody's answer for valid JSON that is not an object.
var ErrNotObject = errors.New("the request body must be a JSON object")

// NewBody checks that raw is one valid JSON object (surrounding whitespace
// allowed) and returns it as a Body holding a copy of raw. Invalid JSON
// is the *json.SyntaxError that encoding/json reports for it.
func NewBody(raw []byte) (*Body, error) {
	if !json.Valid(raw) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		return nil, errors.New("invalid JSON") // unreachable: Valid and Unmarshal agree
	}
	t := jsonscan.Trim(raw)
	if jsonscan.KindOf(t) != jsonscan.Object {
		return nil, ErrNotObject
	}
	b := &Body{raw: append([]byte(nil), t...)}
	b.members = collect(b.inline[:0], b.raw)
	return b, nil
}

// BodyOf returns the JSON object of fields as a Body (tests and callers
// that hold decoded members). Keys are written in sorted order.
func BodyOf(fields map[string]json.RawMessage) (*Body, error) {
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	b := &Body{raw: raw}
	b.members = collect(b.inline[:0], b.raw)
	return b, nil
}

// Raw returns the object's bytes; the caller must not modify them.
func (b *Body) Raw() []byte { return b.raw }

// Get returns the value of member key (the last one when the key is
// repeated, as encoding/json decodes it) and whether it is there. A null
// value is returned like any other.
func (b *Body) Get(key string) (json.RawMessage, bool) {
	if b == nil {
		return nil, false
	}
	for i := len(b.members) - 1; i >= 0; i-- {
		if jsonscan.KeyIs(b.members[i].key, key) {
			return b.members[i].val, true
		}
	}
	return nil, false
}

// rewriteBody returns the body to send upstream: every member of the
// client's object in its order (a repeated key once, at its last
// occurrence, with its last value), "routebalance" dropped, "model" set to
// model, on a stream "stream_options" with include_usage true (not for the
// Responses API), and the max_tokens clamp applied (max_output_tokens for
// the Responses API); members it adds go at the end.
func rewriteBody(call *Call, model string) ([]byte, error) {
	src, members := call.Body.raw, call.Body.members
	out := make([]byte, 0, len(src)+len(model)+64)
	out = append(out, '{')
	first := true
	member := func(key string) {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, '"')
		out = append(out, key...)
		out = append(out, '"', ':')
	}
	var seenModel, seenOpts, clampedA, clampedB bool
	switch call.Endpoint {
	case Embeddings, Tokenize, Detokenize: // no output to clamp, never streamed
		c := *call
		c.MaxTokens, c.Stream = 0, false
		call = &c
	}
	// The Responses API reports usage in its final event without being
	// asked (no stream_options) and names its limit max_output_tokens.
	withOpts, limitKey := call.Stream && call.Endpoint != Responses, "max_tokens"
	if call.Endpoint == Responses {
		limitKey = "max_output_tokens"
	}
	for i, m := range members {
		if repeated(members, i) {
			continue
		}
		switch {
		case jsonscan.KeyIs(m.key, "routebalance"):
			continue
		case jsonscan.KeyIs(m.key, "model"):
			member("model")
			out = appendJSONString(out, model)
			seenModel = true
			continue
		case withOpts && jsonscan.KeyIs(m.key, "stream_options"):
			member("stream_options")
			var err error
			if out, err = appendStreamOptions(out, m.val); err != nil {
				return nil, err
			}
			seenOpts = true
			continue
		case call.MaxTokens > 0 && jsonscan.KeyIs(m.key, limitKey) && !jsonscan.IsNull(m.val):
			member(limitKey)
			out = appendClamped(out, m.val, call.MaxTokens)
			clampedA = true
			continue
		case call.MaxTokens > 0 && call.Endpoint == Chat && jsonscan.KeyIs(m.key, "max_completion_tokens") && !jsonscan.IsNull(m.val):
			member("max_completion_tokens")
			out = appendClamped(out, m.val, call.MaxTokens)
			clampedB = true
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, src[m.k0:m.k0+len(m.key)+2]...) // the key as written, quotes included
		out = append(out, ':')
		out = append(out, m.val...)
	}
	if !seenModel {
		member("model")
		out = appendJSONString(out, model)
	}
	if withOpts && !seenOpts {
		member("stream_options")
		out = append(out, `{"include_usage":true}`...)
	}
	if call.MaxTokens > 0 && !clampedA && !clampedB {
		member(limitKey)
		out = strconv.AppendInt(out, int64(call.MaxTokens), 10)
	}
	return append(out, '}'), nil
}

// span is one member of an object: its raw key (escapes not decoded),
// the index of the key's opening quote and the value.
type span struct {
	key []byte
	k0  int
	val []byte
}

// collect appends the members of the object obj to dst.
func collect(dst []span, obj []byte) []span {
	it := jsonscan.Members(obj)
	for {
		k, v, k0, ok := it.NextMember()
		if !ok {
			return dst
		}
		dst = append(dst, span{key: k, k0: k0, val: v})
	}
}

// repeated reports whether a later member has the key of members[i]
// (encoding/json keeps the last value of a repeated key).
func repeated(members []span, i int) bool {
	for _, m := range members[i+1:] {
		if string(m.key) == string(members[i].key) || sameKey(m.key, members[i].key) {
			return true
		}
	}
	return false
}

// sameKey compares two raw keys by their decoded text (only needed when
// one of them has an escape or invalid UTF-8).
func sameKey(a, b []byte) bool {
	if jsonscan.Simple(a) && jsonscan.Simple(b) {
		return false // equal raw bytes were compared already
	}
	var ba, bb [64]byte
	da, ok1 := jsonscan.AppendUnquoted(ba[:0], a)
	db, ok2 := jsonscan.AppendUnquoted(bb[:0], b)
	return ok1 && ok2 && string(da) == string(db)
}

// appendStreamOptions writes the client's stream_options object with
// include_usage forced to true (an absent or null value becomes
// {"include_usage":true}).
func appendStreamOptions(out, val []byte) ([]byte, error) {
	if jsonscan.IsNull(val) {
		return append(out, `{"include_usage":true}`...), nil
	}
	if jsonscan.KindOf(val) != jsonscan.Object {
		return nil, errors.New("stream_options: must be an object")
	}
	out = append(out, '{')
	var buf [16]span
	members := collect(buf[:0], val)
	for i, m := range members {
		if jsonscan.KeyIs(m.key, "include_usage") || repeated(members, i) {
			continue
		}
		out = append(out, val[m.k0:m.k0+len(m.key)+2]...)
		out = append(out, ':')
		out = append(out, m.val...)
		out = append(out, ',')
	}
	return append(out, `"include_usage":true}`...), nil
}

// appendClamped writes the client's token limit, or max when the client's
// is not a positive integer at most max.
func appendClamped(out, val []byte, max int) []byte {
	if v, err := strconv.Atoi(string(val)); err == nil && v > 0 && v <= max {
		return append(out, val...)
	}
	return strconv.AppendInt(out, int64(max), 10)
}

// appendJSONString writes s as a JSON string, escaped as encoding/json
// escapes it.
func appendJSONString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			b, _ := json.Marshal(s) // rare: model names are plain ASCII
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}
