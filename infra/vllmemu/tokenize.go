package vllmemu

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// Vocab is the emulator's tokenizer table. The emulator has no real
// tokenizer: /tokenize cuts text into exactly EstimateTokens(text) pieces
// (the count every usage figure of the emulator is based on) and gives each
// piece a stable id, a hash of its text, so the same text always has the
// same ids; /detokenize maps ids back through the table, which remembers
// the pieces it has handed out (up to maxVocab of them). Safe for
// concurrent use.
type Vocab struct {
	mu     sync.Mutex
	pieces map[int64]string
}

// maxVocab bounds the table; ids handed out beyond it still tokenize but
// cannot be detokenized.
const maxVocab = 1 << 20

// NewVocab returns an empty table.
func NewVocab() *Vocab { return &Vocab{pieces: map[int64]string{}} }

// id returns piece's id and records it.
func (v *Vocab) id(piece string) int64 {
	h := int64(engine.HashPrompt(0x70c, "", piece) & (1<<31 - 1))
	v.mu.Lock()
	if _, ok := v.pieces[h]; !ok && len(v.pieces) < maxVocab {
		v.pieces[h] = piece
	}
	v.mu.Unlock()
	return h
}

// Tokenize returns the ids of text: exactly EstimateTokens(text) of them.
func (v *Vocab) Tokenize(text string) []int64 {
	n := routing.EstimateTokens(text)
	pieces := splitPieces(text, n)
	out := make([]int64, 0, n)
	for _, p := range pieces {
		out = append(out, v.id(p))
	}
	for len(out) < n { // text shorter in runes than its estimate
		out = append(out, v.id(""))
	}
	return out
}

// TokenizeChat returns the ids of a chat prompt: the template's tokens
// around each message and the priming tokens, routing.EstimateChatTokens(contents)
// in all.
func (v *Vocab) TokenizeChat(roles, contents []string) []int64 {
	var out []int64
	for i, c := range contents {
		out = append(out, v.id("<|start_header_id|>"), v.id(roles[i]), v.id("<|end_header_id|>"), v.id("\n\n"))
		out = append(out, v.Tokenize(c)...)
		out = append(out, v.id("<|eot_id|>"))
	}
	return append(out, v.id("<|start_header_id|>"), v.id("assistant"), v.id("<|end_header_id|>"))
}

// Detokenize returns the text of ids; an id the table does not know is an
// error naming its position.
func (v *Vocab) Detokenize(ids []int64) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b []byte
	for i, id := range ids {
		p, ok := v.pieces[id]
		if !ok {
			return "", fmt.Errorf("token id %d at position %d is not in the vocabulary", id, i)
		}
		b = append(b, p...)
	}
	return string(b), nil
}

type tokenizeRequest struct {
	Model    string        `json:"model"`
	Prompt   *string       `json:"prompt"`
	Messages []chatMessage `json:"messages"`
}

type tokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int64 `json:"tokens"`
	TokenStrs   any     `json:"token_strs"`
}

type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	if !s.servesModel(w, req.Model) {
		return
	}
	var ids []int64
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.fail(w, &badRequest{"prompt", "give either prompt or messages, not both"})
		return
	case req.Prompt != nil:
		ids = s.vocab.Tokenize(*req.Prompt)
	case len(req.Messages) > 0:
		roles := make([]string, len(req.Messages))
		contents := make([]string, len(req.Messages))
		for i, m := range req.Messages {
			c, err := messageText(m.Content)
			if err != nil {
				s.fail(w, &badRequest{fmt.Sprintf("messages[%d].content", i), err.Error()})
				return
			}
			roles[i], contents[i] = m.Role, c
		}
		ids = s.vocab.TokenizeChat(roles, contents)
	default:
		s.fail(w, &badRequest{"prompt", "prompt (a string) or messages (a non-empty array) is required"})
		return
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: s.tier.ContextLen(), Tokens: ids})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	if !s.servesModel(w, req.Model) {
		return
	}
	text, err := s.vocab.Detokenize(req.Tokens)
	if err != nil {
		s.fail(w, &badRequest{"tokens", err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text})
}
