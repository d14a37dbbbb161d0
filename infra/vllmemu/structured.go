package vllmemu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/routebalance/routebalance/routing/engine"
)

// Structured output: tool calls and response_format answers are JSON the
// emulator builds from the request's JSON Schema (the subset guided
// decoding engines honour: type, properties, required, items, enum,
// const, minimum/maximum, minItems/maxItems), with values chosen by hash so
// the same request gets the same answer. Unknown keywords are ignored;
// a schema that is not an object is refused as vLLM refuses it.

// maxSchemaDepth bounds recursion through nested schemas.
const maxSchemaDepth = 8

type schemaGen struct {
	h    uint64
	n    uint64
	text *textSource
}

func newSchemaGen(model, prompt string, choice int) *schemaGen {
	return &schemaGen{h: engine.HashPrompt(uint64(choice)+0x7001, model, prompt), text: newTextSource(model, prompt, choice)}
}

func (g *schemaGen) draw() uint64 {
	g.n++
	return engine.Splitmix(g.h + g.n*0x9e3779b97f4a7c15)
}

// value writes a JSON value satisfying schema to b.
func (g *schemaGen) value(b *bytes.Buffer, schema map[string]any, depth int) error {
	if depth > maxSchemaDepth {
		return fmt.Errorf("schema nests deeper than %d levels", maxSchemaDepth)
	}
	if c, ok := schema["const"]; ok {
		return writeJSONValue(b, c)
	}
	if e, ok := schema["enum"].([]any); ok && len(e) > 0 {
		return writeJSONValue(b, e[g.draw()%uint64(len(e))])
	}
	for _, key := range [...]string{"anyOf", "oneOf"} {
		if alts, ok := schema[key].([]any); ok && len(alts) > 0 {
			sub, ok := alts[0].(map[string]any)
			if !ok {
				return fmt.Errorf("%s entries must be schemas", key)
			}
			return g.value(b, sub, depth+1)
		}
	}
	typ := schemaType(schema)
	switch typ {
	case "object":
		return g.object(b, schema, depth)
	case "array":
		items, _ := schema["items"].(map[string]any)
		if items == nil {
			items = map[string]any{"type": "string"}
		}
		lo, hi := intKeyword(schema, "minItems", 1), intKeyword(schema, "maxItems", 3)
		if hi < lo {
			hi = lo
		}
		n := lo + int(g.draw()%uint64(hi-lo+1))
		b.WriteByte('[')
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := g.value(b, items, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case "integer", "number":
		lo, hi := numKeyword(schema, "minimum", 0), numKeyword(schema, "maximum", 100)
		if hi < lo {
			hi = lo
		}
		v := lo + float64(g.draw()%1000)/999*(hi-lo)
		if typ == "integer" {
			b.WriteString(strconv.FormatInt(int64(v), 10))
			return nil
		}
		b.WriteString(strconv.FormatFloat(float64(int64(v*100))/100, 'f', -1, 64))
		return nil
	case "boolean":
		b.WriteString(strconv.FormatBool(g.draw()%2 == 0))
		return nil
	case "null":
		b.WriteString("null")
		return nil
	default: // "string" and untyped
		words := 2 + int(g.draw()%4)
		var s strings.Builder
		start := int(g.draw() % 64)
		for i := 0; i < words; i++ {
			s.WriteString(g.text.token(start + i + 1)) // skip the marker
		}
		return writeJSONValue(b, strings.TrimSpace(s.String()))
	}
}

func (g *schemaGen) object(b *bytes.Buffer, schema map[string]any, depth int) error {
	props, _ := schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic output
	if len(names) == 0 {
		// json_object with no schema: a small answer object.
		props = map[string]any{"answer": map[string]any{"type": "string"}, "confidence": map[string]any{"type": "number", "minimum": 0.0, "maximum": 1.0}}
		names = []string{"answer", "confidence"}
	}
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		_ = writeJSONValue(b, name)
		b.WriteByte(':')
		sub, _ := props[name].(map[string]any)
		if sub == nil {
			sub = map[string]any{}
		}
		if err := g.value(b, sub, depth+1); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func schemaType(schema map[string]any) string {
	switch t := schema["type"].(type) {
	case string:
		return t
	case []any: // ["string","null"]: the first non-null type
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
		return "null"
	}
	if _, ok := schema["properties"]; ok {
		return "object"
	}
	return ""
}

func intKeyword(schema map[string]any, key string, def int) int {
	if v, ok := schema[key].(float64); ok && v >= 0 && v <= 64 {
		return int(v)
	}
	return def
}

func numKeyword(schema map[string]any, key string, def float64) float64 {
	if v, ok := schema[key].(float64); ok {
		return v
	}
	return def
}

func writeJSONValue(b *bytes.Buffer, v any) error {
	enc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(enc)
	return nil
}

// parseSchema decodes a JSON Schema object; empty means "any object".
func parseSchema(raw json.RawMessage, param string) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return map[string]any{"type": "object"}, nil
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, &badRequest{param, "the schema must be a JSON object"}
	}
	return s, nil
}

// generateJSON builds the structured answer for schema.
func generateJSON(model, prompt string, choice int, schema map[string]any, param string) (string, error) {
	var b bytes.Buffer
	if err := newSchemaGen(model, prompt, choice).value(&b, schema, 0); err != nil {
		return "", &badRequest{param, err.Error()}
	}
	return b.String(), nil
}

// toolPlan is the tool a chat request must call, or none.
type toolPlan struct {
	name   string
	schema map[string]any
}

// planTools reads tools and tool_choice. A call is made when tool_choice is
// "required" (the first tool, or one by hash when several) or names a
// function; "none", "auto" and no tool_choice answer with text (the
// emulator has no tool parser to decide on its own, like a vLLM server
// started without --enable-auto-tool-choice).
func planTools(tools []toolDef, rawChoice json.RawMessage, model, prompt string) (*toolPlan, error) {
	for i, t := range tools {
		if t.Type != "" && t.Type != "function" {
			return nil, &badRequest{fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tool type must be \"function\", got %q", t.Type)}
		}
		if strings.TrimSpace(t.Function.Name) == "" {
			return nil, &badRequest{fmt.Sprintf("tools[%d].function.name", i), "every tool needs a function name"}
		}
	}
	if len(rawChoice) == 0 || string(rawChoice) == "null" {
		return nil, nil
	}
	var mode string
	if err := json.Unmarshal(rawChoice, &mode); err == nil {
		switch mode {
		case "none", "auto":
			return nil, nil
		case "required":
			if len(tools) == 0 {
				return nil, &badRequest{"tool_choice", "tool_choice \"required\" needs at least one tool"}
			}
			t := tools[engine.HashPrompt(0x7001, model, prompt)%uint64(len(tools))]
			s, err := parseSchema(t.Function.Parameters, "tools.function.parameters")
			if err != nil {
				return nil, err
			}
			return &toolPlan{name: t.Function.Name, schema: s}, nil
		}
		return nil, &badRequest{"tool_choice", fmt.Sprintf("tool_choice must be \"none\", \"auto\", \"required\" or a named function, got %q", mode)}
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(rawChoice, &named); err != nil || named.Function.Name == "" {
		return nil, &badRequest{"tool_choice", "tool_choice must be a string or {\"type\":\"function\",\"function\":{\"name\":…}}"}
	}
	for _, t := range tools {
		if t.Function.Name == named.Function.Name {
			s, err := parseSchema(t.Function.Parameters, "tools.function.parameters")
			if err != nil {
				return nil, err
			}
			return &toolPlan{name: t.Function.Name, schema: s}, nil
		}
	}
	return nil, &badRequest{"tool_choice", fmt.Sprintf("tool_choice names %q, which is not in tools", named.Function.Name)}
}

// formatSchema reads response_format: nil means free text.
func formatSchema(rf *responseFormat) (map[string]any, error) {
	if rf == nil {
		return nil, nil
	}
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return map[string]any{"type": "object"}, nil
	case "json_schema":
		if rf.JSONSchema == nil {
			return nil, &badRequest{"response_format.json_schema", "response_format json_schema needs a json_schema object"}
		}
		return parseSchema(rf.JSONSchema.Schema, "response_format.json_schema.schema")
	}
	return nil, &badRequest{"response_format.type", fmt.Sprintf("response_format type must be text, json_object or json_schema, got %q", rf.Type)}
}
