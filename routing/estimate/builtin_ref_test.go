package estimate

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/routebalance/routebalance/internal/benchcpu"
)

// refEmbedOne is the built-in embedder as it was before the fast path
// (2026-12-01): a rune buffer and an FNV loop per character n-gram, a
// counter table cleared and scanned whole, math.Log per feature. It is
// the reference the fast path must reproduce (TestBuiltinMatchesReference)
// and the baseline of BenchmarkEmbedder.
func refEmbedOne(b *Builtin, text string, s *featScratch, v []float32) {
	clear(v)
	clear(s.slots)
	s.used = 0
	s.idx = s.idx[:0]
	refFeatures(b, text, s)
	d := uint64(len(v))
	mask := uint64(len(b.idf) - 1)
	for _, e := range s.slots {
		if e.key == 0 {
			continue
		}
		w := (1 + float32(math.Log(float64(e.count)))) * e.weight
		if b.idf != nil {
			w *= b.idf[e.key&mask]
		}
		h := e.key >> 20
		if h&1 == 1 {
			w = -w
		}
		v[(h>>1)%d] += w
	}
	normalize(v)
}

func refFeatures(b *Builtin, text string, s *featScratch) {
	if len(text) > b.cfg.MaxBytes {
		text = text[:b.cfg.MaxBytes]
	}
	ww, bw, cw := float32(b.cfg.WordWeight), float32(b.cfg.BigramWeight), float32(b.cfg.CharWeight)
	var prev uint64
	havePrev := false
	i := 0
	for i < len(text) {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		start := i
		for i < len(text) {
			r, size = utf8.DecodeRuneInString(text[i:])
			if !isWordRune(r) {
				break
			}
			i += size
		}
		word := text[start:i]
		wh := hashLower(word, seedWord)
		if ww > 0 {
			s.add(wh, ww)
		}
		if havePrev && bw > 0 {
			s.add(mix(prev^seedBigram, wh), bw)
		}
		prev, havePrev = wh, true
		if cw > 0 && b.cfg.CharMax > 0 {
			var buf [64]rune
			rs := buf[:0]
			rs = append(rs, ' ')
			for _, r := range word {
				if len(rs) == cap(buf)-1 {
					break
				}
				rs = append(rs, unicode.ToLower(r))
			}
			rs = append(rs, ' ')
			for n := b.cfg.CharMin; n <= b.cfg.CharMax; n++ {
				if n == 0 || n > len(rs) {
					continue
				}
				for j := 0; j+n <= len(rs); j++ {
					h := uint64(seedChar) ^ uint64(n)
					for _, r := range rs[j : j+n] {
						h = (h ^ uint64(r)) * 0x100000001b3
					}
					s.add(finalize(h), cw)
				}
			}
		}
	}
}

// BenchmarkEmbedder compares the reference embedder with the built-in
// one over the same 256 prompts in one run (cpu-ns/op is per prompt).
func BenchmarkEmbedder(b *testing.B) {
	recs, src := benchData(b)
	b.Logf("prompts from %s", src)
	emb, _ := NewBuiltin(DefaultBuiltinConfig())
	texts := make([]string, len(recs))
	for i, r := range recs {
		texts[i] = r.Prompt
	}
	emb.Fit(texts)
	prompts := make([]string, 256)
	for i := range prompts {
		prompts[i] = texts[(i*131)%len(texts)]
	}
	v := make([]float32, emb.Dim())
	dst := make([]float32, len(prompts)*emb.Dim())
	b.Run("reference", func(b *testing.B) {
		s := newFeatScratch(1024)
		b.ReportAllocs()
		benchcpu.Measure(b, func() {
			for _, p := range prompts {
				refEmbedOne(emb, p, s, v)
			}
		})
		b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(len(prompts)), "ns/prompt")
	})
	b.Run("builtin", func(b *testing.B) {
		b.ReportAllocs()
		benchcpu.Measure(b, func() { _ = emb.Embed(context.Background(), prompts, dst) })
		b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/float64(len(prompts)), "ns/prompt")
	})
}

var _ = fmt.Sprint

// TestBuiltinMatchesReference: the fast path embeds every text as the
// reference does (same features, same hashes; only the order of the
// float sums differs), for ASCII, mixed-script, over-long and empty texts.
func TestBuiltinMatchesReference(t *testing.T) {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      .,;:?!()[]{}=+-*/\n\tÄäÖößéèçñ日本語Ωπ€\u0301")
	rng := rand.New(rand.NewSource(7))
	texts := []string{"", " ", "a", "Hello, World!", "ÄBC straße Straße STRASSE", "日本語のテキスト mixed with ASCII",
		strings.Repeat("x", 200) + " tail", strings.Repeat("é", 100), "def f(x):\n    return x**2  # 42"}
	for i := 0; i < 300; i++ {
		n := rng.Intn(600)
		rs := make([]rune, n)
		for j := range rs {
			rs[j] = alphabet[rng.Intn(len(alphabet))]
		}
		texts = append(texts, string(rs))
	}
	texts = append(texts, strings.Repeat("word ", 3000)) // beyond MaxBytes
	for _, cfg := range []BuiltinConfig{DefaultBuiltinConfig(),
		{Dim: 64, IDFBits: 12, CharMin: 2, CharMax: 4, WordWeight: 1, BigramWeight: 0.5, CharWeight: 0.5, MaxBytes: 256},
		{Dim: 128, IDFBits: 10, CharMin: 0, CharMax: 0, WordWeight: 1, BigramWeight: 1, CharWeight: 1, MaxBytes: 8192}} {
		b, err := NewBuiltin(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.Fit(texts[:len(texts)/2])
		got := make([]float32, len(texts)*b.Dim())
		if err := b.Embed(context.Background(), texts, got); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, b.Dim())
		s := newFeatScratch(16)
		for i, text := range texts {
			refEmbedOne(b, text, s, want)
			for j, w := range want {
				if g := got[i*b.Dim()+j]; math.Abs(float64(g-w)) > 1e-5 {
					t.Fatalf("cfg %+v text %d (%.40q) dim %d: got %v, reference %v", cfg, i, text, j, g, w)
				}
			}
		}
	}
}
