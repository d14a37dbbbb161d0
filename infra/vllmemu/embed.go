package vllmemu

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// Embeddings: an embedding tier answers POST /v1/embeddings in vLLM's (and
// OpenAI's) shape with deterministic vectors. A vector is the normalised
// sum of one pseudo-random Gaussian direction per word and per word pair
// of the input, seeded by (model, word): texts that share words get close
// vectors, so the vectors behave like a (crude) semantic embedding, and
// the same text always gets the same vector. Each input passes through the
// engine as a sequence of its prompt tokens and one output token, so
// embedding requests queue, batch and show in /metrics like the real
// pooling runner's (prefill-dominated).

// maxEmbeddingInputs caps the inputs of one request (OpenAI's limit).
const maxEmbeddingInputs = 2048

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

type embeddingData struct {
	Index     int    `json:"index"`
	Object    string `json:"object"`
	Embedding any    `json:"embedding"` // []float32 or a base64 string
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   usage           `json:"usage"`
}

// embeddingInputs reads input: a string, an array of strings, an array of
// token ids or an array of such arrays. Token ids become the words
// "t<id>". It returns each input's text and token count.
func embeddingInputs(raw json.RawMessage) ([]string, []int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, errors.New("input is required")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil, errors.New("input must not be an empty string")
		}
		return []string{one}, []int{max(routing.EstimateTokens(one), 1)}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err == nil {
		if len(many) == 0 {
			return nil, nil, errors.New("input must not be an empty array")
		}
		counts := make([]int, len(many))
		for i, s := range many {
			if s == "" {
				return nil, nil, fmt.Errorf("input[%d] must not be an empty string", i)
			}
			counts[i] = max(routing.EstimateTokens(s), 1)
		}
		return many, counts, nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return nil, nil, errors.New("input must not be an empty array")
		}
		return []string{idText(ids)}, []int{len(ids)}, nil
	}
	var idss [][]int64
	if err := json.Unmarshal(raw, &idss); err == nil && len(idss) > 0 {
		texts, counts := make([]string, len(idss)), make([]int, len(idss))
		for i, ids := range idss {
			if len(ids) == 0 {
				return nil, nil, fmt.Errorf("input[%d] must not be an empty array", i)
			}
			texts[i], counts[i] = idText(ids), len(ids)
		}
		return texts, counts, nil
	}
	return nil, nil, errors.New("input must be a string, an array of strings, an array of token ids or an array of token-id arrays")
}

func idText(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('t')
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// EmbedText is the emulator's deterministic embedding of text for model:
// a unit vector of dims components (see the package comment on
// embeddings).
func EmbedText(model, text string, dims int) []float32 {
	acc := make([]float64, dims)
	var words []string
	for _, f := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		words = append(words, f)
	}
	add := func(feature string, weight float64) {
		h := engine.HashPrompt(0xe4b, model, feature)
		for k := 0; k < dims; k += 2 {
			x := engine.Splitmix(h + uint64(k)*0x9e3779b97f4a7c15)
			u1 := (float64(x>>32) + 0.5) / (1 << 32)
			u2 := (float64(x&0xffffffff) + 0.5) / (1 << 32)
			r := math.Sqrt(-2 * math.Log(u1))
			acc[k] += weight * r * math.Cos(2*math.Pi*u2)
			if k+1 < dims {
				acc[k+1] += weight * r * math.Sin(2*math.Pi*u2)
			}
		}
	}
	for i, w := range words {
		add(w, 1)
		if i > 0 {
			add(words[i-1]+" "+w, 0.5)
		}
	}
	if len(words) == 0 {
		add(text, 1) // punctuation only: still a stable vector
	}
	var norm float64
	for _, v := range acc {
		norm += v * v
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for k, v := range acc {
		out[k] = float32(v / norm)
	}
	return out
}

// truncateUnit keeps the first n components and renormalises (how
// Matryoshka models serve a smaller dimensions).
func truncateUnit(v []float32, n int) []float32 {
	v = v[:n]
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		return v
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
	return v
}

func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	if !s.tier.IsEmbedding() {
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf("The model `%s` does not support the Embeddings API.", s.model))
		return
	}
	var req embeddingRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	texts, counts, err := embeddingInputs(req.Input)
	if err != nil {
		s.fail(w, &badRequest{"input", err.Error()})
		return
	}
	if len(texts) > maxEmbeddingInputs {
		s.fail(w, &badRequest{"input", fmt.Sprintf("at most %d inputs per request, got %d", maxEmbeddingInputs, len(texts))})
		return
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		s.fail(w, &badRequest{"encoding_format", fmt.Sprintf("encoding_format must be \"float\" or \"base64\", got %q", req.EncodingFormat)})
		return
	}
	dims := s.tier.EmbeddingDims()
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > dims {
			s.fail(w, &badRequest{"dimensions", fmt.Sprintf("dimensions must be between 1 and %d, got %d", dims, *req.Dimensions)})
			return
		}
	}
	if !s.admit(w, r, req.Model) {
		return
	}
	reqs := make([]engine.Request, len(texts))
	total := 0
	for i, t := range texts {
		if counts[i] >= s.tier.ContextLen() {
			s.fail(w, &badRequest{"input", fmt.Sprintf("This model's maximum context length is %d tokens. However, input[%d] has %d tokens.", s.tier.ContextLen(), i, counts[i])})
			return
		}
		reqs[i] = engine.Request{Prompt: t, PromptTokens: counts[i], MaxTokens: 1, IgnoreEOS: true}
		total += counts[i]
	}
	sub := s.submitOr(w, "embd-", reqs, "input")
	if sub == nil {
		return
	}
	if _, ok := s.await(r.Context(), sub, func([]int) error { return nil }); !ok {
		return
	}
	out := embeddingResponse{ID: sub.ids[0], Object: "list", Created: time.Now().Unix(), Model: s.model,
		Data: make([]embeddingData, len(texts)), Usage: usage{PromptTokens: total, TotalTokens: total}}
	for i, t := range texts {
		v := EmbedText(s.model, t, dims)
		if req.Dimensions != nil {
			v = truncateUnit(v, *req.Dimensions)
		}
		var e any = v
		if req.EncodingFormat == "base64" {
			e = base64Floats(v)
		}
		out.Data[i] = embeddingData{Index: i, Object: "embedding", Embedding: e}
	}
	writeJSON(w, http.StatusOK, out)
}
