package routing

import (
	"math"
	"unicode"
)

// ChatTemplateTokens is the per-message overhead a chat prompt's estimate
// adds for role headers and separators (Llama-3-style templates spend 4–5
// tokens per message), and ChatPrimingTokens the fixed tokens that prime
// the assistant's answer.
const (
	ChatTemplateTokens = 5
	ChatPrimingTokens  = 3
)

// EstimateTokens estimates the token count of text without a tokenizer.
// It is the one estimate of the routing path: the api prices and routes a
// prompt with it, the simulator and the emulator (infra/vllmemu) count
// with it, so the scheduler sees the same counts live and simulated.
// A rune of a CJK script (Han, Hiragana, Katakana, Hangul) is one token;
// the rest is the mean of two common rules of thumb for English BPE
// vocabularies, characters/4 and words×4/3, rounded, where a word is a
// maximal run of letters/digits and each other non-space rune
// (punctuation, symbols) counts as a word of its own, since BPE
// tokenizers split them off. Non-empty text is at least 1 token.
func EstimateTokens(text string) int {
	if text == "" {
		return 0
	}
	wide, chars, words := 0, 0, 0
	inWord := false
	for _, r := range text {
		switch {
		case r >= 0x2E80 && (unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
			unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)):
			wide++
			inWord = false
			continue
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if !inWord {
				words++
				inWord = true
			}
		case unicode.IsSpace(r):
			inWord = false
		default:
			words++
			inWord = false
		}
		chars++
	}
	return max(wide+int(math.Round((float64(chars)/4+float64(words)*4/3)/2)), 1)
}

// EstimateChatTokens estimates the prompt tokens of a chat from its
// messages' text contents: EstimateTokens of each plus
// ChatTemplateTokens, plus ChatPrimingTokens.
func EstimateChatTokens(contents []string) int {
	n := ChatPrimingTokens
	for _, c := range contents {
		n += EstimateTokens(c) + ChatTemplateTokens
	}
	return n
}
