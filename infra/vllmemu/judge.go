package vllmemu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/routebalance/routebalance/routing/engine"
)

// The rubric's delimiters, as routing/quality writes them (quality.Rubric;
// TestEmulatedJudgeLearns checks the two agree end to end).
const (
	rubricRequestOpen = "Request:\n<<<\n"
	rubricAnswerOpen  = "\n>>>\n\nAnswer:\n<<<\n"
	rubricAnswerClose = "\n>>>\n\n"
)

// LabelLookup gives the hidden quality labels of a prompt: score in [0,1]
// per model. Implementations must be safe for concurrent use.
type LabelLookup interface {
	Labels(prompt string) (map[string]float64, bool)
}

// LabelTable maps exact prompts to their labels; read-only after loading.
type LabelTable map[string]map[string]float64

// Labels returns the prompt's labels, if the table has them.
func (t LabelTable) Labels(prompt string) (map[string]float64, bool) {
	l, ok := t[prompt]
	return l, ok
}

// ReadLabelTable reads JSON lines with "prompt" and "scores" fields (the
// `routebalance index build` line format; other fields are ignored).
// Lines without scores are skipped.
func ReadLabelTable(r io.Reader) (LabelTable, error) {
	t := LabelTable{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var rec struct {
			Prompt string             `json:"prompt"`
			Scores map[string]float64 `json:"scores"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if len(rec.Scores) > 0 {
			t[rec.Prompt] = rec.Scores
		}
	}
	return t, sc.Err()
}

// Judge makes an instance a judge-kind instance: a chat request holding
// the judge rubric of routing/quality (quality.Rubric) is answered with a
// score read from hidden labels, every other request as before. Judge is
// what it knows: the labels, and how noisy it is.
type Judge struct {
	// Labels are the true labels of the prompts it may be asked about.
	Labels LabelLookup
	// Flip is the probability that a judgment reports the opposite
	// score (6 − s), drawn anew for each judgment from the instance's
	// seed and a count. In [0, 0.5).
	Flip float64
}

// Validate checks the judge.
func (j *Judge) Validate() error {
	if j.Labels == nil {
		return fmt.Errorf("judge: no labels")
	}
	if !(j.Flip >= 0 && j.Flip < 0.5) {
		return fmt.Errorf("judge: flip must be in [0, 0.5), got %v", j.Flip)
	}
	return nil
}

// rubricTexts extracts the request and the answer from a rubric message.
func rubricTexts(msg string) (request, answer string, ok bool) {
	i := strings.Index(msg, rubricRequestOpen)
	if i < 0 {
		return "", "", false
	}
	rest := msg[i+len(rubricRequestOpen):]
	j := strings.Index(rest, rubricAnswerOpen)
	if j < 0 {
		return "", "", false
	}
	request, rest = rest[:j], rest[j+len(rubricAnswerOpen):]
	k := strings.LastIndex(rest, rubricAnswerClose)
	if k < 0 {
		return "", "", false
	}
	return request, rest[:k], true
}

// answeredBy finds which of the models wrote answer to prompt: the one
// whose emulated text (newTextSource, choice 0) starts like it.
func answeredBy(prompt, answer string, models []string) (string, bool) {
	words := strings.Fields(answer)
	if len(words) < 2 {
		return "", false
	}
	n := min(len(words), 12)
	for _, m := range models {
		src := newTextSource(m, prompt, 0)
		match := true
		for i := 0; i < n && match; i++ {
			match = strings.TrimSpace(src.token(i)) == words[i]
		}
		if match {
			return m, true
		}
	}
	return "", false
}

// judgment returns n for the next judgment of model's answer to prompt:
// 1 for the first, 2 for the second … counted per (model, prompt), so the
// scores a pair receives do not depend on how judgments of other pairs
// interleave with it (one counter for all made the flips depend on the
// order concurrent requests reached the judge).
func (s *Server) judgment(prompt, model string) uint64 {
	s.judgedMu.Lock()
	defer s.judgedMu.Unlock()
	if s.judged == nil {
		s.judged = map[string]uint64{}
	}
	k := model + "\x00" + prompt
	s.judged[k]++
	return s.judged[k]
}

// judgeScore is the judge's n-th score, 1–5, of model's answer to prompt
// with label q: 1 + round(4q), flipped with probability Flip by a draw
// from the seed, the prompt, the model and n (the n-th judgment of that
// pair; each judgment draws anew).
func (s *Server) judgeScore(prompt, model string, n uint64, q float64) int {
	score := 1 + int(math.Round(4*math.Max(0, math.Min(1, q))))
	u := float64(engine.Splitmix(engine.HashPrompt(s.seed^0x6a09e667, model, prompt)+n*0x9e3779b97f4a7c15)>>11) / (1 << 53)
	if u < s.judge.Flip {
		score = 6 - score
	}
	return score
}

// serveJudgment answers a rubric request: "Score: s" for the labelled
// answer, 400 when the request, the answering model or its label is not
// known. A judgment bypasses the engine (no modelled latency).
func (s *Server) serveJudgment(w http.ResponseWriter, j *job, msg string) {
	prompt, answer, _ := rubricTexts(msg)
	labels, ok := s.judge.Labels.Labels(prompt)
	if !ok {
		writeError(w, http.StatusBadRequest, "messages", "judge: the request is not in the labelled set")
		return
	}
	models := make([]string, 0, len(labels))
	for m := range labels {
		models = append(models, m)
	}
	sort.Strings(models)
	model, ok := answeredBy(prompt, answer, models)
	if !ok {
		writeError(w, http.StatusBadRequest, "messages", "judge: the answer was not written by a labelled model")
		return
	}
	n := s.judgment(prompt, model)
	content, stop := fmt.Sprintf("Score: %d", s.judgeScore(prompt, model, n, labels[model])), "stop"
	out := chatResponse{ID: fmt.Sprintf("chatcmpl-judge-%d", n), Object: "chat.completion", Created: time.Now().Unix(), Model: s.model,
		Choices: []chatChoice{{Index: 0, Message: &chatOutMessage{Role: "assistant", Content: &content}, FinishReason: &stop}},
		Usage:   &usage{PromptTokens: j.promptTokens, CompletionTokens: 3, TotalTokens: j.promptTokens + 3}}
	writeJSON(w, http.StatusOK, out)
}
