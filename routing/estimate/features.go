package estimate

import "math"

// NumPromptFeatures is the number of cheap text features PromptFeatures
// computes.
const NumPromptFeatures = 16

// PromptFeatureNames names PromptFeatures' outputs, in order.
var PromptFeatureNames = [NumPromptFeatures]string{
	"log_bytes", "log_words", "log_lines", "digit_frac", "log_math_symbols",
	"log_code_markers", "log_choice_lines", "log_questions", "log_numbers",
	"upper_frac", "mean_word_len", "non_ascii_frac", "log_longest_line", "log_sentences",
	"starts_lower", "ends_question",
}

// PromptFeatures computes cheap difficulty and format signals of a prompt
// in one pass over its first maxBytes bytes, without allocating: size
// (bytes, words, lines, sentences, longest line), math (digits, numbers,
// operator and LaTeX symbols), code (keywords and brackets), multiple
// choice (lines opening with "A)", "(B)", "C." …), questions, case and
// script. Counts are log1p'd; fractions are in [0,1].
func PromptFeatures(p string, maxBytes int, f *[NumPromptFeatures]float32) {
	if maxBytes > 0 && len(p) > maxBytes {
		p = p[:maxBytes]
	}
	var (
		words, lines, digits, mathSym, code, choices, questions, numbers int
		upper, letters, nonASCII, wordChars, sentences                   int
		lineLen, longest                                                 int
	)
	inWord, inNum := false, false
	lineStart := 0 // index of the first byte of the current line
	lines = 1
	for i := 0; i < len(p); i++ {
		c := p[i]
		isLetter := (c|0x20) >= 'a' && (c|0x20) <= 'z'
		isDigit := c >= '0' && c <= '9'
		if c >= 0x80 {
			nonASCII++
		}
		switch {
		case isLetter || isDigit || c >= 0x80:
			if !inWord {
				words++
				inWord = true
			}
			wordChars++
		default:
			inWord = false
		}
		if isLetter {
			letters++
			if c <= 'Z' {
				upper++
			}
		}
		if isDigit {
			digits++
			if !inNum {
				numbers++
				inNum = true
			}
		} else if c != '.' && c != ',' {
			inNum = false
		}
		switch c {
		case '=', '+', '*', '/', '^', '$', '\\', '<', '>', '%':
			mathSym++
		case '{', '}', ';', '[', ']', '_', '`', '#':
			code++
		case '?':
			questions++
		case '.', '!':
			if i+1 == len(p) || p[i+1] == ' ' || p[i+1] == '\n' {
				sentences++
			}
		case '\n':
			lines++
			longest = max(longest, lineLen)
			lineLen = 0
			lineStart = i + 1
			continue
		case 'd':
			if hasPrefixAt(p, i, "def ") || hasPrefixAt(p, i, "def\t") {
				code += 3
			}
		case 'r':
			if hasPrefixAt(p, i, "return") {
				code += 2
			}
		case 'i':
			if hasPrefixAt(p, i, "import ") {
				code += 3
			}
		}
		lineLen++
		if i == lineStart {
			// "A) ", "A. ", "A: ", "(A) ", " B)": a multiple-choice option.
			j := i
			if p[j] == '(' || p[j] == ' ' {
				j++
			}
			if j+1 < len(p) && p[j] >= 'A' && p[j] <= 'J' && (p[j+1] == ')' || p[j+1] == '.' || p[j+1] == ':') {
				choices++
			}
		}
	}
	longest = max(longest, lineLen)
	n := float64(max(len(p), 1))
	l1 := func(x int) float32 { return float32(math.Log1p(float64(x))) }
	f[0] = l1(len(p))
	f[1] = l1(words)
	f[2] = l1(lines)
	f[3] = float32(float64(digits) / n)
	f[4] = l1(mathSym)
	f[5] = l1(code)
	f[6] = l1(choices)
	f[7] = l1(questions)
	f[8] = l1(numbers)
	f[9] = float32(float64(upper) / float64(max(letters, 1)))
	f[10] = float32(float64(wordChars) / float64(max(words, 1)) / 10)
	f[11] = float32(float64(nonASCII) / n)
	f[12] = l1(longest)
	f[13] = l1(sentences)
	f[14], f[15] = 0, 0
	if len(p) > 0 && p[0] >= 'a' && p[0] <= 'z' {
		f[14] = 1
	}
	for i := len(p) - 1; i >= 0; i-- {
		if c := p[i]; c != ' ' && c != '\n' && c != '\t' {
			if c == '?' {
				f[15] = 1
			}
			break
		}
	}
}

func hasPrefixAt(s string, i int, pre string) bool {
	return len(s)-i >= len(pre) && s[i:i+len(pre)] == pre
}
