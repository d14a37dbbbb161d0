package vllmemu

import (
	"math"
	"strings"

	"github.com/routebalance/routebalance/routing/engine"
)

// EmulatedMarker opens every generated text answer so nobody mistakes the
// emulator's prose for a model's.
const EmulatedMarker = "[emulated]"

// answerCorpus is the prose an emulated answer is assembled from: whole
// sentences, picked by hash of (model, prompt, choice), so an answer reads
// as text, is the same for the same request, and differs across models and
// choices. The sentences are deliberately generic: they show what passes
// through the router, not what a model knows.
var answerCorpus = [...]string{
	"Let us work through the question one step at a time.",
	"The first thing to settle is what the question is really asking.",
	"Once the given quantities are written down the rest follows.",
	"A quick check with a smaller example confirms the pattern.",
	"The key observation is that both sides change by the same amount.",
	"Putting the pieces together gives the result below.",
	"This answer comes from an emulated vLLM instance, not a real model.",
	"In short, the most likely answer is the second option.",
	"There are two common ways to approach this, and both agree here.",
	"The definition makes the next step almost mechanical.",
	"Each case can be handled on its own and then combined.",
	"It helps to compare the options against the facts we already have.",
	"A careful reading rules out the answers that contradict the premise.",
	"The calculation is short once the units are consistent.",
	"If the assumption did not hold, the conclusion would change.",
	"Most of the work is in stating the problem precisely.",
	"The function returns early when the input is empty.",
	"A loop over the items collects the values that pass the test.",
	"Edge cases such as zero and negative numbers need a separate check.",
	"The final line prints the total so it can be verified.",
	"Historically, the question has been answered in the same way.",
	"That leaves only one choice consistent with every clue.",
	"The evidence points clearly in one direction.",
	"So the answer is the value that satisfies both conditions.",
	"A table of the intermediate results makes this easy to follow.",
	"Simplifying the expression removes the common factor.",
	"Nothing in the statement suggests a trick, so the direct reading holds.",
	"Thus the total is the sum of the parts computed above.",
	"Rounding only at the end keeps the result exact.",
	"The same reasoning applies to the remaining items.",
	"With that settled, the answer follows directly.",
	"I hope this explanation makes the reasoning clear.",
}

// textSource yields the words of one emulated answer: the marker, then
// sentences of the corpus chosen by hash. Token i is word i; every token
// but the first carries its leading space, as a BPE tokenizer's would.
type textSource struct {
	h     uint64
	words []string
	next  uint64 // sentences drawn so far
}

func newTextSource(model, prompt string, choice int) *textSource {
	h := engine.HashPrompt(uint64(choice)+0x5eed, model, prompt)
	return &textSource{h: h, words: []string{EmulatedMarker}}
}

// token returns token i of the answer.
func (t *textSource) token(i int) string {
	for len(t.words) <= i {
		x := engine.Splitmix(t.h + t.next*0x9e3779b97f4a7c15)
		t.next++
		t.words = append(t.words, strings.Fields(answerCorpus[x%uint64(len(answerCorpus))])...)
	}
	if i == 0 {
		return t.words[0]
	}
	return " " + t.words[i]
}

// maxTopLogprobs is the most alternatives per token the emulator returns
// (vLLM's default --max-logprobs).
const maxTopLogprobs = 20

// tokenLogprob is one emitted token's log-probability and its top
// alternatives in descending order; the first alternative is the token
// itself (the emulator always "samples" the most likely token).
type tokenLogprob struct {
	Token   string
	Logprob float64
	Top     []altLogprob
}

type altLogprob struct {
	Token   string
	Logprob float64
}

// logprobFor invents a deterministic, well-formed distribution for token
// tok at position i: the token's own probability p in [0.1, 0.99) and
// k−1 alternatives from the corpus with min(p, 1−p)/2, /4, … — so the token
// is the most likely, the list descends, and the mass stays below 1.
// The values are not a model's; they show what the router passes through.
func logprobFor(model, tok string, i, k int) tokenLogprob {
	h := engine.HashPrompt(uint64(i), model, tok)
	p := 0.1 + 0.89*float64(h>>11)/float64(1<<53) // p in [0.1, 0.99)
	lp := math.Log(p)
	out := tokenLogprob{Token: tok, Logprob: lp}
	if k <= 0 {
		return out
	}
	out.Top = make([]altLogprob, 0, k)
	out.Top = append(out.Top, altLogprob{Token: tok, Logprob: lp})
	rest := min(p, 1-p) // halved per alternative: each below the token, all below 1 − p in sum
	seen := map[string]bool{tok: true}
	for j := 1; j < k; j++ {
		x := engine.Splitmix(h + uint64(j)*0x9e3779b97f4a7c15)
		words := strings.Fields(answerCorpus[x%uint64(len(answerCorpus))])
		alt := " " + words[(x>>32)%uint64(len(words))]
		for seen[alt] {
			alt += "s" // keep alternatives distinct without a second draw
		}
		seen[alt] = true
		rest /= 2 // each alternative takes half of what is left
		out.Top = append(out.Top, altLogprob{Token: alt, Logprob: math.Log(rest)})
	}
	return out
}

// tokenBytes is a token's UTF-8 bytes as the ints OpenAI's logprobs carry.
func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// splitPieces cuts s into n contiguous pieces of near-equal byte length on
// rune boundaries (n ≥ 1; fewer pieces when s is shorter than n runes).
// Structured answers (JSON, tool arguments) stream in these pieces, one
// per token.
func splitPieces(s string, n int) []string {
	runes := []rune(s)
	if n < 1 {
		n = 1
	}
	if n > len(runes) {
		n = len(runes)
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		a, b := i*len(runes)/n, (i+1)*len(runes)/n
		out = append(out, string(runes[a:b]))
	}
	return out
}
