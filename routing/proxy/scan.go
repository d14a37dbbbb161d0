package proxy

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/routebalance/routebalance/internal/jsonscan"
	"github.com/routebalance/routebalance/routing"
)

// Reading the upstream's answers without encoding/json. The relay needs a
// few members of every answer (the usage, the finish reasons, whether a
// chunk carries text); decoding the whole answer into structs cost ~5 % of
// the gateway's CPU at c=64 and several allocations per answer and per
// streamed event. The scanners below read those members in place
// (internal/jsonscan) and give exactly what encoding/json's decode into
// the old structs gave. Whenever they cannot be sure of that — a key that
// is escaped, non-ASCII or a case variant of one of ours (encoding/json
// matches keys case-insensitively), a key repeated, a value of another
// type than the struct field's (the decode then fails as a whole) — they
// report false without having changed anything, and the caller decodes
// with encoding/json as before. FuzzScanChat and FuzzScanChunk compare
// both ways on any input.

// fieldIndex looks a raw member key up among names: the index of the name
// it is exactly, or -1 when it is none of them. sure is false when
// encoding/json might match the key to one of names although it is not
// exactly one (an escape, a non-ASCII byte, or an ASCII case variant).
func fieldIndex(k []byte, names []string) (i int, sure bool) {
	for _, c := range k {
		if c == '\\' || c >= utf8.RuneSelf {
			return -1, false
		}
	}
	for i, n := range names {
		if string(k) == n {
			return i, true
		}
	}
	for _, n := range names {
		if asciiEqualFold(k, n) {
			return -1, false
		}
	}
	return -1, true
}

func asciiEqualFold(k []byte, n string) bool {
	if len(k) != len(n) {
		return false
	}
	for i := range len(k) {
		a, b := k[i], n[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// members walks the object v calling fn for each member that is one of
// names (by index), at most once per name. It returns false when a key is
// unsure (fieldIndex), a name is repeated, or fn returns false.
func members(v []byte, names []string, fn func(i int, val []byte) bool) bool {
	var seen uint32
	it := jsonscan.Members(v)
	for {
		k, val, _, more := it.NextMember()
		if !more {
			return true
		}
		i, sure := fieldIndex(k, names)
		if !sure {
			return false
		}
		if i < 0 {
			continue
		}
		if seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		if !fn(i, val) {
			return false
		}
	}
}

// intValue reads an integer member as encoding/json decodes it into a
// signed integer of bits bits: null leaves it alone (set false), a number
// without fraction or exponent within the range is its value; anything
// else is a type error (ok false).
func intValue(v []byte, bits uint) (n int64, set, ok bool) {
	if jsonscan.IsNull(v) {
		return 0, false, true
	}
	if len(v) == 0 {
		return 0, false, false
	}
	neg := v[0] == '-'
	d := v
	if neg {
		d = v[1:]
	}
	if len(d) == 0 || len(d) > 19 {
		return 0, false, false
	}
	var u uint64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		u = u*10 + uint64(c-'0')
	}
	limit := uint64(1)<<(bits-1) - 1
	if neg {
		limit++
	}
	if u > limit {
		return 0, false, false
	}
	if neg {
		return -int64(u), true, true
	}
	return int64(u), true, true
}

// intBits is the size of an int in bits.
const intBits = 32 << (^uint(0) >> 63)

// stringBody returns the body of a JSON string value (between its
// quotes); null gives (nil, false, true): no effect on the field; another
// kind is a type error (ok false).
func stringBody(v []byte) (body []byte, set, ok bool) {
	switch {
	case jsonscan.IsNull(v):
		return nil, false, true
	case jsonscan.KindOf(v) == jsonscan.String && len(v) >= 2:
		return v[1 : len(v)-1], true, true
	}
	return nil, false, false
}

// decodeString returns the string a JSON string body decodes to.
func decodeString(body []byte) (string, bool) {
	if jsonscan.Simple(body) {
		return string(body), true
	}
	b, ok := jsonscan.AppendUnquoted(nil, body)
	return string(b), ok
}

// bodyIs reports whether a JSON string body decodes to s.
func bodyIs(body []byte, s string) bool {
	if jsonscan.Simple(body) {
		return string(body) == s
	}
	var buf [32]byte
	b, ok := jsonscan.AppendUnquoted(buf[:0], body)
	return ok && string(b) == s
}

// objectOrNull reports whether v is an object (obj) or null; another kind
// is a type error (ok false).
func objectOrNull(v []byte) (obj, ok bool) {
	if jsonscan.IsNull(v) {
		return false, true
	}
	return true, jsonscan.KindOf(v) == jsonscan.Object
}

var (
	chatFields    = []string{"usage", "choices"}
	usageFields   = []string{"prompt_tokens", "completion_tokens"}
	choiceFields  = []string{"finish_reason", "text", "message"}
	messageFields = []string{"content", "reasoning_content", "tool_calls"}
)

// scanUsage reads a usage object (or null) into u; set is false for null.
func scanUsage(v []byte, u *usage) (set, ok bool) {
	obj, ok := objectOrNull(v)
	if !ok || !obj {
		return false, ok
	}
	ok = members(v, usageFields, func(i int, val []byte) bool {
		n, set, ok := intValue(val, intBits)
		if set {
			if i == 0 {
				u.PromptTokens = int(n)
			} else {
				u.CompletionTokens = int(n)
			}
		}
		return ok
	})
	return true, ok
}

// scanChat is countChat without encoding/json: it fills res exactly as
// countChatDecode would, or reports false with res untouched.
func scanChat(raw []byte, res *Result) bool {
	if !json.Valid(raw) {
		return false
	}
	v := jsonscan.Trim(raw)
	if jsonscan.KindOf(v) != jsonscan.Object {
		return false
	}
	var uv, cv []byte
	if !members(v, chatFields, func(i int, val []byte) bool {
		if i == 0 {
			uv = val
		} else {
			cv = val
		}
		return true
	}) {
		return false
	}
	var u usage
	hasUsage := false
	if uv != nil {
		set, ok := scanUsage(uv, &u)
		if !ok {
			return false
		}
		hasUsage = set
	}
	truncated, out := false, 0
	if cv != nil && !jsonscan.IsNull(cv) {
		if jsonscan.KindOf(cv) != jsonscan.Array {
			return false
		}
		el := jsonscan.Elements(cv)
		for {
			e, more := el.NextElement()
			if !more {
				break
			}
			if jsonscan.KindOf(e) != jsonscan.Object {
				return false // null elements and type errors: the decoder says
			}
			ok := members(e, choiceFields, func(i int, val []byte) bool {
				switch i {
				case 0: // finish_reason
					body, set, ok := stringBody(val)
					if set && bodyIs(body, "length") {
						truncated = true
					}
					return ok
				case 1: // text
					body, set, ok := stringBody(val)
					if set && !hasUsage {
						n, ok2 := estimateBody(body)
						out += n
						ok = ok && ok2
					}
					return ok
				}
				obj, ok := objectOrNull(val) // message
				if !ok || !obj {
					return ok
				}
				return members(val, messageFields, func(i int, val []byte) bool {
					if i == 2 { // tool_calls: any value, counted as written
						if !hasUsage {
							out += routing.EstimateTokens(string(val))
						}
						return true
					}
					body, set, ok := stringBody(val)
					if set && !hasUsage {
						n, ok2 := estimateBody(body)
						out += n
						ok = ok && ok2
					}
					return ok
				})
			})
			if !ok {
				return false
			}
		}
	}
	res.Outcome.Truncated = res.Outcome.Truncated || truncated
	if hasUsage {
		res.UsageReported = true
		res.Outcome.PromptTokens = u.PromptTokens
		res.Outcome.OutputTokens = u.CompletionTokens
	} else {
		res.Outcome.OutputTokens += out
	}
	return true
}

// estimateBody estimates the tokens of a JSON string body's text.
func estimateBody(body []byte) (int, bool) {
	if len(body) == 0 {
		return 0, true
	}
	s, ok := decodeString(body)
	return routing.EstimateTokens(s), ok
}

// chunkView is what the relay reads of one streamed chunk.
type chunkView struct {
	errEvent bool // an "error" member that is not null
	// The chunk's identity, read only when asked (the first chunk).
	id, object, model string
	created           int64
	usage             usage
	hasUsage          bool
	n                 int           // choices
	buf               [8]choiceView // the first choices
	more              []choiceView  // past the 8th (decoded chunks only)
}

// add appends a choice.
func (v *chunkView) add(c choiceView) {
	if v.n < len(v.buf) {
		v.buf[v.n] = c
	} else {
		v.more = append(v.more, c)
	}
	v.n++
}

// choice returns choice i (< v.n).
func (v *chunkView) choice(i int) *choiceView {
	if i < len(v.buf) {
		return &v.buf[i]
	}
	return &v.more[i-len(v.buf)]
}

// choiceView is one choice of a streamed chunk.
type choiceView struct {
	index    int
	finished bool // a non-empty finish_reason
	length   bool // finish_reason "length"
	content  bool // text, content, reasoning or a tool call in it
}

// fromChunk fills v from a decoded chunk.
func (v *chunkView) fromChunk(c *chunk) {
	v.errEvent = len(c.Error) > 0 && !isNull(c.Error)
	v.id, v.object, v.created, v.model = c.ID, c.Object, c.Created, c.Model
	if c.Usage != nil {
		v.usage, v.hasUsage = *c.Usage, true
	}
	for _, ch := range c.Choices {
		cv := choiceView{index: ch.Index}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			cv.finished, cv.length = true, *ch.FinishReason == "length"
		}
		cv.content = ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" ||
			ch.Delta.Reasoning != "" || (len(ch.Delta.ToolCalls) > 0 && !isNull(ch.Delta.ToolCalls))
		v.add(cv)
	}
}

var (
	chunkFields       = []string{"id", "object", "created", "model", "error", "usage", "choices"}
	chunkChoiceFields = []string{"index", "text", "delta", "finish_reason"}
	deltaFields       = []string{"content", "reasoning_content", "reasoning", "tool_calls"}
)

// scanChunk reads a streamed chunk into v exactly as decoding it into a
// chunk and fromChunk would (the identity strings only when meta), or
// reports false; v is then to be filled by the decoder.
func scanChunk(payload []byte, meta bool, v *chunkView) bool {
	if !json.Valid(payload) {
		return false
	}
	o := jsonscan.Trim(payload)
	if jsonscan.KindOf(o) != jsonscan.Object {
		return false
	}
	var cv []byte
	ok := members(o, chunkFields, func(i int, val []byte) bool {
		switch i {
		case 0, 1, 3: // id, object, model
			body, set, ok := stringBody(val)
			if set && meta {
				s, ok2 := decodeString(body)
				switch i {
				case 0:
					v.id = s
				case 1:
					v.object = s
				default:
					v.model = s
				}
				ok = ok && ok2
			}
			return ok
		case 2: // created
			n, set, ok := intValue(val, 64)
			if set {
				v.created = n
			}
			return ok
		case 4: // error: any value; an event unless null
			v.errEvent = !jsonscan.IsNull(val)
			return true
		case 5:
			set, ok := scanUsage(val, &v.usage)
			v.hasUsage = set
			return ok
		}
		cv = val // choices, read below
		return true
	})
	if !ok {
		return false
	}
	if cv == nil || jsonscan.IsNull(cv) {
		return true
	}
	if jsonscan.KindOf(cv) != jsonscan.Array {
		return false
	}
	el := jsonscan.Elements(cv)
	for {
		e, more := el.NextElement()
		if !more {
			return true
		}
		if jsonscan.KindOf(e) != jsonscan.Object || v.n == len(v.buf) {
			return false // null elements, type errors, many choices: the decoder says
		}
		var c choiceView
		if !members(e, chunkChoiceFields, func(i int, val []byte) bool {
			switch i {
			case 0: // index
				n, set, ok := intValue(val, intBits)
				if set {
					c.index = int(n)
				}
				return ok
			case 1: // text
				body, _, ok := stringBody(val)
				c.content = c.content || len(body) > 0
				return ok
			case 3: // finish_reason
				body, set, ok := stringBody(val)
				if set && len(body) > 0 {
					c.finished, c.length = true, bodyIs(body, "length")
				}
				return ok
			}
			obj, ok := objectOrNull(val) // delta
			if !ok || !obj {
				return ok
			}
			return members(val, deltaFields, func(i int, val []byte) bool {
				if i == 3 { // tool_calls: any value but null
					c.content = c.content || !jsonscan.IsNull(val)
					return true
				}
				body, _, ok := stringBody(val)
				c.content = c.content || len(body) > 0
				return ok
			})
		}) {
			return false
		}
		v.add(c)
	}
}
