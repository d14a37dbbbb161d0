package api

import (
	"strconv"

	"github.com/routebalance/routebalance/internal/jsonscan"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
)

// parseResponses validates the JSON body of POST /v1/responses (OpenAI's
// Responses API) and reads what routing needs: model (a served chat model
// or "auto"), input (a non-empty string, or a non-empty array of input
// items), the optional instructions (a string), max_output_tokens (an
// integer >= 1), stream (a boolean) and stream_options (an object).
//
// The prompt the estimators see is the instructions and the text of the
// input: the string, or each message item's content (a string, or its
// input_text / output_text parts) and the output of function_call_output
// items; its tokens are counted as a chat prompt's (routing's one
// estimate: text, plus the template's tokens per message, instructions
// counting as one). Items of other types (function calls, reasoning,
// images, files) are forwarded untouched.
//
// previous_response_id and conversation are refused: a stored response
// lives on the one instance that made it, and RouteBalance routes each
// request on its own; so is background (its answer is fetched later
// from that instance). Every other field is forwarded as written.
func parseResponses(raw []byte) (*completionBody, error) {
	b, err := openBody(raw)
	if err != nil {
		return nil, err
	}
	fields := b.fields
	if b.stream, err = optBool(fields, "stream"); err != nil {
		return nil, err
	}
	if raw, ok := present(fields, "stream_options"); ok && jsonscan.KindOf(raw) != jsonscan.Object {
		return nil, typeError("stream_options", "an object", raw)
	}
	if b.maxTokens, _, err = optPositiveInt(fields, "max_output_tokens"); err != nil {
		return nil, err
	}
	for _, k := range []string{"previous_response_id", "conversation"} {
		if _, ok := present(fields, k); ok {
			return nil, badParam(k, "stored responses and conversations are not supported by the router (each request may be served by another instance); send the whole conversation as input")
		}
	}
	if bg, err := optBool(fields, "background"); err != nil || bg {
		if err != nil {
			return nil, err
		}
		return nil, badParam("background", "background responses are not supported by the router")
	}
	var parts []textPart
	messages := 0
	if raw, ok := present(fields, "instructions"); ok {
		if jsonscan.KindOf(raw) != jsonscan.String {
			return nil, typeError("instructions", "a string", raw)
		}
		parts, messages = appendText(parts, raw), 1
	}
	parts, n, err := responseInput(fields, parts)
	if err != nil {
		return nil, err
	}
	b.prompt = joinText(parts)
	b.promptTokens = routing.EstimateTokens(b.prompt) + routing.ChatTemplateTokens*(messages+n) + routing.ChatPrimingTokens
	return b, nil
}

// responseInput appends the text of input to parts and counts its
// messages (a string input is one).
func responseInput(fields *proxy.Body, parts []textPart) ([]textPart, int, error) {
	raw, ok := present(fields, "input")
	if !ok {
		return nil, 0, missingParam("input")
	}
	switch jsonscan.KindOf(raw) {
	case jsonscan.String:
		if len(raw) == 2 {
			return nil, 0, badParam("input", "must not be an empty string")
		}
		return appendText(parts, raw), 1, nil
	case jsonscan.Array:
	default:
		return nil, 0, typeError("input", "a string or an array of input items", raw)
	}
	n := 0
	items := jsonscan.Elements(raw)
	for i := 0; ; i++ {
		it, ok := items.NextElement()
		if !ok {
			if i == 0 {
				return nil, 0, badParam("input", "must not be an empty array")
			}
			return parts, n, nil
		}
		if jsonscan.KindOf(it) != jsonscan.Object {
			return nil, 0, typeError(itemParam(i, ""), "an object", it)
		}
		item := object(it)
		typ := "message" // an item without a type is a message (EasyInputMessage)
		if t, ok := present(item, "type"); ok {
			s, ok := jsonString(t)
			if !ok || s == "" {
				return nil, 0, badParam(itemParam(i, ".type"), "must be a non-empty string")
			}
			typ = s
		}
		switch typ {
		case "message":
			var err error
			if parts, err = messageItem(item, i, parts); err != nil {
				return nil, 0, err
			}
			n++
		case "function_call_output":
			if out, ok := present(item, "output"); ok && jsonscan.KindOf(out) == jsonscan.String {
				parts = appendText(parts, out)
			}
			n++
		}
	}
}

// messageItem checks one message item (role a non-empty string; content
// a string or an array of content parts, each an object with a
// non-empty type) and appends its text parts.
func messageItem(item object, i int, parts []textPart) ([]textPart, error) {
	if !nonEmptyString(item, "role") {
		return nil, badParam(itemParam(i, ".role"), "must be a non-empty string")
	}
	content, ok := present(item, "content")
	if !ok {
		return nil, missingParam(itemParam(i, ".content"))
	}
	switch jsonscan.KindOf(content) {
	case jsonscan.String:
		return appendText(parts, content), nil
	case jsonscan.Array:
	default:
		return nil, typeError(itemParam(i, ".content"), "a string or an array of content parts", content)
	}
	ps := jsonscan.Elements(content)
	for j := 0; ; j++ {
		p, ok := ps.NextElement()
		if !ok {
			return parts, nil
		}
		param := itemParam(i, ".content["+strconv.Itoa(j)+"]")
		if jsonscan.KindOf(p) != jsonscan.Object {
			return nil, typeError(param, "an object", p)
		}
		part := object(p)
		t, ok := present(part, "type")
		typ, isStr := jsonString(t)
		if !ok || !isStr || typ == "" {
			return nil, badParam(param+".type", "must be a non-empty string")
		}
		if typ != "input_text" && typ != "output_text" && typ != "text" {
			continue // images, files and audio do not feed the text estimators
		}
		text, ok := present(part, "text")
		if !ok || jsonscan.KindOf(text) != jsonscan.String {
			return nil, badParam(param+".text", "must be a string")
		}
		parts = appendText(parts, text)
	}
}

func itemParam(i int, suffix string) string { return "input[" + strconv.Itoa(i) + "]" + suffix }
