package estimate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unicode"
	"unicode/utf8"
)

// BuiltinConfig configures the built-in hashed n-gram embedder.
type BuiltinConfig struct {
	// Dim is the number of output dimensions (default 384).
	Dim int `json:"dim"`
	// IDFBits is log2 of the size of the hashed document-frequency table
	// (default 18: 262,144 buckets, 1 MiB of float32).
	IDFBits int `json:"idf_bits"`
	// CharMin and CharMax bound the character n-gram sizes taken inside
	// each padded word (default 3 and 5).
	CharMin int `json:"char_min"`
	CharMax int `json:"char_max"`
	// WordWeight, BigramWeight and CharWeight scale the three feature
	// families before normalisation (defaults 1, 0, 1: bigrams off, chosen
	// by routing outcome on the LLMRouter split — see README).
	WordWeight   float64 `json:"word_weight"`
	BigramWeight float64 `json:"bigram_weight"`
	CharWeight   float64 `json:"char_weight"`
	// MaxBytes caps how much of a prompt is read (default 8192): the head
	// carries the task; the cap bounds the cost of huge prompts.
	MaxBytes int `json:"max_bytes"`
}

// DefaultBuiltinConfig returns the defaults documented on BuiltinConfig.
func DefaultBuiltinConfig() BuiltinConfig {
	return BuiltinConfig{Dim: 384, IDFBits: 18, CharMin: 3, CharMax: 5,
		WordWeight: 1, BigramWeight: 0, CharWeight: 1, MaxBytes: 8192}
}

// Validate reports whether the configuration is usable.
func (c BuiltinConfig) Validate() error {
	switch {
	case c.Dim < 8 || c.Dim > 65536:
		return fmt.Errorf("builtin embedder: dim must be in [8, 65536], got %d", c.Dim)
	case c.IDFBits < 8 || c.IDFBits > 26:
		return fmt.Errorf("builtin embedder: idf_bits must be in [8, 26], got %d", c.IDFBits)
	case c.CharMin < 0 || c.CharMax < c.CharMin || c.CharMax > 8:
		return fmt.Errorf("builtin embedder: char n-gram range [%d, %d] invalid (0 ≤ min ≤ max ≤ 8)", c.CharMin, c.CharMax)
	case c.WordWeight < 0 || c.BigramWeight < 0 || c.CharWeight < 0 ||
		c.WordWeight+c.BigramWeight+c.CharWeight == 0:
		return errors.New("builtin embedder: feature weights must be ≥ 0 and not all 0")
	case c.MaxBytes < 16:
		return fmt.Errorf("builtin embedder: max_bytes must be ≥ 16, got %d", c.MaxBytes)
	}
	return nil
}

// Builtin is a pure-Go text embedder: signed feature hashing of word
// unigrams, word bigrams and character n-grams, each weighted by sublinear
// term frequency (1 + ln tf) times an IDF learned by Fit, then
// L2-normalised. It is safe for concurrent use once fitted.
type Builtin struct {
	cfg  BuiltinConfig
	idf  []float32 // len 1<<IDFBits; nil until Fit or LoadIDF
	docs int
	pool sync.Pool // *featScratch
}

var _ Embedder = (*Builtin)(nil)

// NewBuiltin returns an unfitted embedder (every IDF is 1) with cfg.
func NewBuiltin(cfg BuiltinConfig) (*Builtin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Builtin{cfg: cfg}
	b.pool.New = func() any { return newFeatScratch(1024) }
	return b, nil
}

// Config returns the embedder's configuration.
func (b *Builtin) Config() BuiltinConfig { return b.cfg }

// Dim returns the vector length.
func (b *Builtin) Dim() int { return b.cfg.Dim }

func (b *Builtin) spec() EmbedderSpec {
	c := b.cfg
	return EmbedderSpec{Kind: "builtin", Dim: c.Dim, Builtin: &c}
}

// Fit learns IDF weights from a corpus: idf(f) = ln((1+N)/(1+df(f))) + 1
// over hashed feature buckets. It replaces any earlier fit and must not run
// concurrently with Embed.
func (b *Builtin) Fit(texts []string) {
	size := 1 << b.cfg.IDFBits
	mask := uint64(size - 1)
	df := make([]uint32, size)
	seen := make([]uint32, size) // last doc index+1 that touched the bucket
	s := b.pool.Get().(*featScratch)
	for i, t := range texts {
		s.reset()
		b.features(t, s)
		for _, si := range s.idx {
			k := s.slots[si].key & mask
			if seen[k] != uint32(i+1) {
				seen[k] = uint32(i + 1)
				df[k]++
			}
		}
	}
	b.pool.Put(s)
	n := float64(len(texts))
	idf := make([]float32, size)
	for k := range idf {
		idf[k] = float32(math.Log((1+n)/(1+float64(df[k]))) + 1)
	}
	b.idf, b.docs = idf, len(texts)
}

// Embed writes one L2-normalised vector per text into dst, row-major
// (len(dst) must be len(texts)·Dim()). It never fails for valid sizes.
func (b *Builtin) Embed(_ context.Context, texts []string, dst []float32) error {
	d := b.cfg.Dim
	if len(dst) != len(texts)*d {
		return fmt.Errorf("builtin embedder: dst has %d floats, want %d", len(dst), len(texts)*d)
	}
	s := b.pool.Get().(*featScratch)
	for i, t := range texts {
		b.embedOne(t, s, dst[i*d:(i+1)*d])
	}
	b.pool.Put(s)
	return nil
}

func (b *Builtin) embedOne(text string, s *featScratch, v []float32) {
	clear(v)
	s.reset()
	b.features(text, s)
	d := uint64(len(v))
	mask := uint64(len(b.idf) - 1)
	for _, si := range s.idx {
		e := &s.slots[si]
		var lt float32
		if e.count < uint32(len(logCount)) {
			lt = logCount[e.count]
		} else {
			lt = float32(math.Log(float64(e.count)))
		}
		w := (1 + lt) * e.weight
		if b.idf != nil {
			w *= b.idf[e.key&mask]
		}
		// The IDF bucket uses the low bits; the dimension and the sign use
		// independent high bits of the same 64-bit hash.
		h := e.key >> 20
		if h&1 == 1 {
			w = -w
		}
		v[(h>>1)%d] += w
	}
	normalize(v)
}

// logCount[c] is float32(ln c), the sublinear term frequency of a count.
var logCount = func() (t [256]float32) {
	for c := 1; c < len(t); c++ {
		t[c] = float32(math.Log(float64(c)))
	}
	return t
}()

// normalize scales v to unit length; a zero vector stays zero.
func normalize(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(ss))
	for i := range v {
		v[i] *= inv
	}
}

// Hash seeds keep the three feature families apart.
const (
	seedWord   = 0x9e3779b97f4a7c15
	seedBigram = 0xc2b2ae3d27d4eb4f
	seedChar   = 0x165667b19e3779f9
)

// features adds every feature of text to s. ASCII words (the common case)
// take a byte-wise path; any other word the rune-wise one. Both produce the
// same hashes for the same lower-cased characters.
func (b *Builtin) features(text string, s *featScratch) {
	if len(text) > b.cfg.MaxBytes {
		text = text[:b.cfg.MaxBytes]
	}
	ww, bw, cw := float32(b.cfg.WordWeight), float32(b.cfg.BigramWeight), float32(b.cfg.CharWeight)
	chars := cw > 0 && b.cfg.CharMax > 0
	var prev uint64
	havePrev := false
	i := 0
	for i < len(text) {
		// Skip to the start of a word: a run of letters or digits.
		if c := text[i]; c < utf8.RuneSelf {
			if !asciiWord[c] {
				i++
				continue
			}
		} else {
			r, size := utf8.DecodeRuneInString(text[i:])
			if !isWordRune(r) {
				i += size
				continue
			}
		}
		start := i
		ascii := true
		for i < len(text) {
			if c := text[i]; c < utf8.RuneSelf {
				if !asciiWord[c] {
					break
				}
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(text[i:])
			if !isWordRune(r) {
				break
			}
			ascii = false
			i += size
		}
		word := text[start:i]
		var wh uint64
		if ascii {
			wh = b.asciiWord(word, s, chars, cw)
		} else {
			wh = hashLower(word, seedWord)
			if chars {
				b.charGrams(word, s, cw)
			}
		}
		if ww > 0 {
			s.add(wh, ww)
		}
		if havePrev && bw > 0 {
			s.add(mix(prev^seedBigram, wh), bw)
		}
		prev, havePrev = wh, true
	}
}

// asciiWord returns the word hash of an all-ASCII word and, when chars is
// set, adds its character n-grams — the same hashes as hashLower and
// charGrams, without decoding runes.
func (b *Builtin) asciiWord(word string, s *featScratch, chars bool, w float32) uint64 {
	var buf [64]byte
	buf[0] = ' '
	n := 1
	h := uint64(seedWord)
	for j := 0; j < len(word); j++ {
		c := word[j]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		h = (h ^ uint64(c)) * 0x100000001b3
		if n < len(buf)-1 {
			buf[n] = c
			n++
		}
	}
	wh := finalize(h)
	if !chars {
		return wh
	}
	buf[n] = ' '
	n++
	rs := buf[:n]
	for g := b.cfg.CharMin; g <= b.cfg.CharMax; g++ {
		if g == 0 || g > n {
			continue
		}
		seed := uint64(seedChar) ^ uint64(g)
		for j := 0; j+g <= n; j++ {
			h := seed
			for _, c := range rs[j : j+g] {
				h = (h ^ uint64(c)) * 0x100000001b3
			}
			s.add(finalize(h), w)
		}
	}
	return wh
}

// asciiWord[c] reports whether the ASCII byte c is a letter or digit.
var asciiWord = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	return t
}()

// charGrams adds the character n-grams of " word " (padded with a space on
// each side, lower-cased, rune-wise).
func (b *Builtin) charGrams(word string, s *featScratch, w float32) {
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
			s.add(finalize(h), w)
		}
	}
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// hashLower is FNV-1a over the lower-cased word, finalised.
func hashLower(word string, seed uint64) uint64 {
	h := seed
	for _, r := range word {
		if r < utf8.RuneSelf {
			if r >= 'A' && r <= 'Z' {
				r += 'a' - 'A'
			}
		} else {
			r = unicode.ToLower(r)
		}
		h = (h ^ uint64(r)) * 0x100000001b3
	}
	return finalize(h)
}

func mix(a, b uint64) uint64 { return finalize(a*0x9e3779b97f4a7c15 ^ b) }

// finalize is splitmix64's finaliser; it never returns 0 so 0 can mark an
// empty slot.
func finalize(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	if h == 0 {
		h = 1
	}
	return h
}

// featScratch is an open-addressing hash table counting features of one
// text; it is reused across texts to avoid allocation. idx lists the slots
// in use in insertion order, so reset and the embedding visit only those.
type featScratch struct {
	slots []featSlot
	used  int
	idx   []int32
}

type featSlot struct {
	key    uint64
	count  uint32
	weight float32
}

func newFeatScratch(n int) *featScratch {
	return &featScratch{slots: make([]featSlot, n), idx: make([]int32, 0, n/2)}
}

func (s *featScratch) reset() {
	for _, i := range s.idx {
		s.slots[i] = featSlot{}
	}
	s.idx = s.idx[:0]
	s.used = 0
}

func (s *featScratch) add(key uint64, w float32) {
	if 2*(s.used+1) > len(s.slots) {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := key & mask; ; i = (i + 1) & mask {
		e := &s.slots[i]
		if e.key == key {
			e.count++
			return
		}
		if e.key == 0 {
			*e = featSlot{key: key, count: 1, weight: w}
			s.used++
			s.idx = append(s.idx, int32(i))
			return
		}
	}
}

func (s *featScratch) grow() {
	old, oldIdx := s.slots, s.idx
	s.slots = make([]featSlot, 2*len(old))
	s.idx = make([]int32, 0, len(s.slots)/2)
	mask := uint64(len(s.slots) - 1)
	for _, oi := range oldIdx {
		e := old[oi]
		for i := e.key & mask; ; i = (i + 1) & mask {
			if s.slots[i].key == 0 {
				s.slots[i] = e
				s.idx = append(s.idx, int32(i))
				break
			}
		}
	}
}

// idfMagic starts the IDF file of a built-in embedder.
const idfMagic = "RBIDF001"

// WriteIDF writes the fitted IDF table: the 8-byte magic "RBIDF001", a
// little-endian uint32 table size, a uint32 document count, then the
// float32 weights.
func (b *Builtin) WriteIDF(w io.Writer) error {
	if b.idf == nil {
		return errors.New("builtin embedder: not fitted")
	}
	hdr := make([]byte, 16)
	copy(hdr, idfMagic)
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(b.idf)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(b.docs))
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("write idf: %w", err)
	}
	return writeFloat32s(w, b.idf)
}

// ReadIDF loads a table written by WriteIDF; its size must match IDFBits.
func (b *Builtin) ReadIDF(r io.Reader) error {
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("read idf header: %w", err)
	}
	if string(hdr[:8]) != idfMagic {
		return fmt.Errorf("read idf: bad magic %q", hdr[:8])
	}
	n := binary.LittleEndian.Uint32(hdr[8:])
	if int(n) != 1<<b.cfg.IDFBits {
		return fmt.Errorf("read idf: table has %d entries, config wants %d", n, 1<<b.cfg.IDFBits)
	}
	idf := make([]float32, n)
	if err := readFloat32s(r, idf); err != nil {
		return fmt.Errorf("read idf: %w", err)
	}
	b.idf, b.docs = idf, int(binary.LittleEndian.Uint32(hdr[12:]))
	return nil
}
