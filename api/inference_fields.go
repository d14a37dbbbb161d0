package api

import (
	"bytes"
	"math"
	"strconv"

	"github.com/routebalance/routebalance/internal/jsonscan"
	"github.com/routebalance/routebalance/routing/proxy"
)

// fieldKind is the JSON shape a checked completion field must have.
type fieldKind uint8

const (
	numberField      fieldKind = iota // a number in [min, max]
	intField                          // an integer in [min, max]
	boolField                         // true or false
	stringField                       // a string
	objectField                       // an object
	stopField                         // a string or an array of strings
	biasField                         // an object of numbers (logit_bias)
	toolsField                        // an array of objects
	stringOrObjField                  // a string or an object (tool_choice)
)

// fieldRule is one OpenAI chat or text completion field the gateway knows
// and checks before relaying: its JSON type and, for numbers, the range
// OpenAI and vLLM both accept. A null value counts as absent; a field not
// in completionFields goes to the instance unchecked (vLLM's extensions
// such as top_k or min_p, and whatever OpenAI adds).
type fieldRule struct {
	key        string
	kind       fieldKind
	min, max   float64
	chat, text bool // the endpoints the rule applies to
}

var inf = math.Inf(1)

// completionFields are checked in this order after model, stream,
// stream_options, max_tokens and messages/prompt; the first failure is the
// 400 (param: the field).
var completionFields = [...]fieldRule{
	{key: "temperature", kind: numberField, min: 0, max: inf, chat: true, text: true},
	{key: "top_p", kind: numberField, min: 0, max: 1, chat: true, text: true},
	{key: "presence_penalty", kind: numberField, min: -2, max: 2, chat: true, text: true},
	{key: "frequency_penalty", kind: numberField, min: -2, max: 2, chat: true, text: true},
	{key: "n", kind: intField, min: 1, max: inf, chat: true, text: true},
	{key: "seed", kind: intField, min: -inf, max: inf, chat: true, text: true},
	{key: "stop", kind: stopField, chat: true, text: true},
	{key: "user", kind: stringField, chat: true, text: true},
	{key: "logit_bias", kind: biasField, chat: true, text: true},
	{key: "logprobs", kind: boolField, chat: true},
	{key: "logprobs", kind: intField, min: 0, max: inf, text: true},
	{key: "top_logprobs", kind: intField, min: 0, max: inf, chat: true},
	{key: "tools", kind: toolsField, chat: true},
	{key: "tool_choice", kind: stringOrObjField, chat: true},
	{key: "response_format", kind: objectField, chat: true},
	{key: "parallel_tool_calls", kind: boolField, chat: true},
	{key: "echo", kind: boolField, text: true},
	{key: "best_of", kind: intField, min: 1, max: inf, text: true},
	{key: "suffix", kind: stringField, text: true},
}

func (r *fieldRule) applies(ep proxy.Endpoint) bool {
	if ep == proxy.Chat {
		return r.chat
	}
	return r.text
}

// want says what the field must be, for its 400.
func (r *fieldRule) want() string {
	switch r.kind {
	case numberField, intField:
		what := "a number"
		if r.kind == intField {
			what = "an integer"
		}
		switch {
		case math.IsInf(r.min, -1) && math.IsInf(r.max, 1):
			return what
		case math.IsInf(r.max, 1):
			return what + " >= " + fmtNum(r.min)
		}
		return what + " between " + fmtNum(r.min) + " and " + fmtNum(r.max)
	case boolField:
		return "a boolean"
	case stringField:
		return "a string"
	case objectField:
		return "an object"
	case stopField:
		return "a string or an array of strings"
	case biasField:
		return "an object mapping token ids to numbers"
	case toolsField:
		return "an array of tool objects"
	case stringOrObjField:
		return "a string or an object"
	}
	return "valid"
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// fieldError is the 400 of a field that breaks its rule: the message names
// the field, what it must be and what came — the JSON type ("Invalid type
// for 'temperature': expected a number >= 0, but got a string instead."),
// the number when only its range is wrong, or the container whose
// elements are wrong.
func (r *fieldRule) fieldError(raw []byte) *paramError {
	k := jsonscan.KindOf(raw)
	switch {
	case (r.kind == numberField || r.kind == intField) && k == jsonscan.Number:
		if r.kind == intField && bytes.ContainsAny(raw, ".eE") {
			return typeError(r.key, r.want(), raw)
		}
		if _, err := strconv.ParseInt(string(raw), 10, 64); r.kind == intField && err != nil {
			return badParam(r.key, "integer out of range. Expected %s of at most 64 bits, but got %s instead.", r.want(), quoted(raw))
		}
		return badParam(r.key, "expected %s, but got %s instead.", r.want(), quoted(raw))
	case (r.kind == stopField || r.kind == toolsField) && k == jsonscan.Array, r.kind == biasField && k == jsonscan.Object:
		return badParam(r.key, "expected %s, but got %s with an element of another type instead.", r.want(), gotKind(raw))
	}
	return typeError(r.key, r.want(), raw)
}

func kindName(k jsonscan.Kind) string {
	switch k {
	case jsonscan.Bool:
		return "boolean"
	case jsonscan.Number:
		return "number"
	case jsonscan.String:
		return "string"
	case jsonscan.Array:
		return "array"
	case jsonscan.Object:
		return "object"
	}
	return "null"
}

// checkFields checks the fields of completionFields that the body has,
// reading each value in place (the body is not decoded again).
func checkFields(fields members, ep proxy.Endpoint) error {
	for i := range completionFields {
		r := &completionFields[i]
		if !r.applies(ep) {
			continue
		}
		raw, ok := present(fields, r.key)
		if ok && !r.valid(raw) {
			return r.fieldError(raw)
		}
	}
	return nil
}

// valid reports whether raw (valid JSON, not null) keeps the rule.
func (r *fieldRule) valid(raw []byte) bool {
	k := jsonscan.KindOf(raw)
	switch r.kind {
	case numberField:
		if k != jsonscan.Number {
			return false
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		return err == nil && f >= r.min && f <= r.max
	case intField:
		if k != jsonscan.Number {
			return false
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		return err == nil && float64(n) >= r.min && float64(n) <= r.max
	case boolField:
		return k == jsonscan.Bool
	case stringField:
		return k == jsonscan.String
	case objectField:
		return k == jsonscan.Object
	case stringOrObjField:
		return k == jsonscan.String || k == jsonscan.Object
	case stopField:
		if k == jsonscan.String {
			return true
		}
		return k == jsonscan.Array && allOf(raw, jsonscan.String)
	case toolsField:
		return k == jsonscan.Array && allOf(raw, jsonscan.Object)
	case biasField:
		if k != jsonscan.Object {
			return false
		}
		it := jsonscan.Members(raw)
		for {
			_, v, _, ok := it.NextMember()
			if !ok {
				return true
			}
			if jsonscan.KindOf(v) != jsonscan.Number {
				return false
			}
		}
	}
	return false
}

// allOf reports whether every element of the array raw is of kind k.
func allOf(raw []byte, k jsonscan.Kind) bool {
	it := jsonscan.Elements(raw)
	for {
		v, ok := it.NextElement()
		if !ok {
			return true
		}
		if jsonscan.KindOf(v) != k {
			return false
		}
	}
}
