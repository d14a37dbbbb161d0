package api

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/routebalance/routebalance/internal/jsonscan"
	"github.com/routebalance/routebalance/routing"
)

// maxEmbeddingInputs caps the entries of an embeddings input array, as
// OpenAI does.
const maxEmbeddingInputs = 2048

// parseEmbedding validates the JSON body of POST /v1/embeddings: model
// (a served embedding model or "auto"), input (a non-empty string, an
// array of non-empty strings, an array of token ids, or an array of
// token-id arrays; at most 2048 entries) and the optional
// encoding_format ("float" or "base64"), dimensions (an integer >= 1)
// and user (a string). Every field is forwarded to the instance as the
// client wrote it; the prompt and its estimated tokens are kept for
// admission and metering.
func parseEmbedding(raw []byte) (*completionBody, error) {
	b, err := openBody(raw)
	if err != nil {
		return nil, err
	}
	fields := b.fields
	if err := b.parseInput(); err != nil {
		return nil, err
	}
	if raw, ok := present(fields, "encoding_format"); ok {
		if s, ok := jsonString(raw); !ok || (s != "float" && s != "base64") {
			return nil, badParam("encoding_format", "must be \"float\" or \"base64\"")
		}
	}
	if _, _, err := optPositiveInt(fields, "dimensions"); err != nil {
		return nil, err
	}
	if raw, ok := present(fields, "user"); ok {
		if _, ok := jsonString(raw); !ok {
			return nil, typeError("user", "a string", raw)
		}
	}
	if raw, ok := present(fields, "stream"); ok && string(raw) != "false" {
		return nil, badParam("stream", "embeddings are not streamed")
	}
	return b, nil
}

// parseInput reads the embeddings input into the prompt and its
// estimated tokens (token ids are counted exactly).
func (b *completionBody) parseInput() error {
	raw, ok := present(b.fields, "input")
	if !ok {
		return missingParam("input")
	}
	switch jsonscan.KindOf(raw) {
	case jsonscan.String:
		s, ok := jsonString(raw)
		if !ok {
			return badParam("input", "must be a valid string")
		}
		if s == "" {
			return badParam("input", "must not be an empty string")
		}
		b.prompt, b.promptTokens = s, routing.EstimateTokens(s)
		return nil
	case jsonscan.Array:
	default:
		return typeError("input", "a string, an array of strings, an array of token ids, or an array of token-id arrays", raw)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return badParam("input", "must be a valid JSON array")
	}
	if len(items) == 0 {
		return badParam("input", "must not be an empty array")
	}
	if len(items) > maxEmbeddingInputs {
		return badParam("input", "must have at most %d entries, got %d", maxEmbeddingInputs, len(items))
	}
	var text strings.Builder
	switch jsonscan.KindOf(items[0]) {
	case jsonscan.String:
		for i, it := range items {
			s, ok := jsonString(it)
			if !ok {
				return badParam(inputParam(i), "must be a string like input[0]")
			}
			if s == "" {
				return badParam(inputParam(i), "must not be an empty string")
			}
			appendPrompt(&text, s)
			b.promptTokens += routing.EstimateTokens(s)
		}
		b.prompt = text.String()
		return nil
	case jsonscan.Number:
		ids, err := tokenIDs(raw, "input")
		if err != nil {
			return err
		}
		b.promptTokens = ids
		return nil
	case jsonscan.Array:
		for i, it := range items {
			n, err := tokenIDs(it, inputParam(i))
			if err != nil {
				return err
			}
			b.promptTokens += n
		}
		return nil
	}
	return badParam("input[0]", "must be a string, a token id or an array of token ids")
}

// tokenIDs counts a non-empty array of token ids (integers >= 0).
func tokenIDs(raw json.RawMessage, param string) (int, error) {
	var ids []uint32
	if json.Unmarshal(raw, &ids) != nil {
		return 0, badParam(param, "must be an array of token ids (integers >= 0)")
	}
	if len(ids) == 0 {
		return 0, badParam(param, "must not be an empty array")
	}
	return len(ids), nil
}

func inputParam(i int) string { return "input[" + strconv.Itoa(i) + "]" }
