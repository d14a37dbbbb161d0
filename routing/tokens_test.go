package routing

import "testing"

func TestEstimateTokens(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"a", 1},
		{"abcd", 1},
		{"Hello, world!", 4}, // (13/4 + 4×4/3)/2 = 4.29
		{"The quick brown fox jumps over the lazy dog.", 12}, // (44/4 + 10×4/3)/2 = 12.2
		{"你好世界", 4},     // one token per CJK rune
		{"hi 你好", 3},    // (3/4 + 1×4/3)/2 = 1.04, plus 2
		{"こんにちは", 5},    // Hiragana
		{"안녕하세요", 5},    // Hangul
		{"w0 w1 w2", 3}, // (8/4 + 3×4/3)/2 = 3
	} {
		if got := EstimateTokens(tt.in); got != tt.want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	if got, want := EstimateChatTokens([]string{"hello there", "ok"}), 3+(3+5)+(1+5); got != want {
		t.Errorf("EstimateChatTokens = %d, want %d", got, want)
	}
}
