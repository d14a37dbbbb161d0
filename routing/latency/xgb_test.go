package latency

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// check.json was written by scripts/train_tpot.py --check together with
// the two models: feature rows and xgboost 1.7.4's own predictions.
type checkFile struct {
	Features []string    `json:"features"`
	Rows     [][]float64 `json:"rows"`
	TPOT     []float64   `json:"tpot"`
	TTFT     []float64   `json:"ttft"`
}

func readCheck(t *testing.T) checkFile {
	t.Helper()
	b, err := os.ReadFile("testdata/check.json")
	if err != nil {
		t.Fatal(err)
	}
	var c checkFile
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) == 0 || len(c.Rows) != len(c.TPOT) || len(c.Rows) != len(c.TTFT) {
		t.Fatalf("check.json: %d rows, %d tpot, %d ttft", len(c.Rows), len(c.TPOT), len(c.TTFT))
	}
	return c
}

func TestXGBMatchesXGBoost(t *testing.T) {
	c := readCheck(t)
	for i, name := range xgbFeatureNames {
		if c.Features[i] != name {
			t.Fatalf("feature %d is %q in the script, %q in Go", i, c.Features[i], name)
		}
	}
	m, _ := New(Config{MinTPOT: 1e-9, MinTTFT: 1e-9})
	tiers, err := m.LoadXGBDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(tiers) != 1 || tiers[0] != "test@cpu" {
		t.Fatalf("loaded tiers %v, want [test@cpu]", tiers)
	}
	for i, r := range c.Rows {
		l := routing.Load{Running: r[0], Waiting: r[1], KVUsage: r[2], PendingDecodeTokens: r[3], PromptTokens: r[4]}
		if got := m.TPOT("test@cpu", l); math.Abs(got-c.TPOT[i]) > 1e-5 {
			t.Errorf("row %d: TPOT = %.7f, xgboost said %.7f", i, got, c.TPOT[i])
		}
		if got := m.TTFT("test@cpu", l); math.Abs(got-c.TTFT[i]) > 1e-5 {
			t.Errorf("row %d: TTFT = %.7f, xgboost said %.7f", i, got, c.TTFT[i])
		}
	}
}

func TestLoadXGBRejectsBadFiles(t *testing.T) {
	good, err := os.ReadFile("testdata/test@cpu.tpot.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadXGB(good); err != nil {
		t.Fatalf("good model: %v", err)
	}
	corrupt := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	// Offsets inside the file (magic included).
	objLen := int(binary.LittleEndian.Uint64(good[4+learnerParamSize:]))
	gbmLen := int(binary.LittleEndian.Uint64(good[4+learnerParamSize+8+objLen:]))
	firstTree := 4 + learnerParamSize + 8 + objLen + 8 + gbmLen + gbtreeParamSize
	firstNode := firstTree + treeParamSize
	cases := map[string][]byte{
		"empty":         {},
		"json":          []byte(`{"learner":{"attributes":{}},"version":[1,7,4]}`),
		"ubjson":        {'{', 'L', 0, 0, 0, 0, 0, 0, 0, 7, 'l', 'e', 'a', 'r', 'n', 'e', 'r'},
		"no magic":      good[4:],
		"text":          []byte("hello, I am not a model"),
		"header only":   good[:4+learnerParamSize],
		"huge string":   corrupt(func(b []byte) { binary.LittleEndian.PutUint64(b[4+learnerParamSize:], 1<<40) }),
		"huge trees":    corrupt(func(b []byte) { binary.LittleEndian.PutUint32(b[firstTree-gbtreeParamSize:], 1<<30) }),
		"huge nodes":    corrupt(func(b []byte) { binary.LittleEndian.PutUint32(b[firstTree+4:], 1<<30) }),
		"bad child":     corrupt(func(b []byte) { binary.LittleEndian.PutUint32(b[firstNode+4:], 99999) }),
		"bad objective": corrupt(func(b []byte) { copy(b[4+learnerParamSize+8:], "binary:logistic\x00") }),
		"zero features": corrupt(func(b []byte) { binary.LittleEndian.PutUint32(b[4+4:], 0) }),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := LoadXGB(b); !errors.Is(err, ErrBadModel) {
				t.Errorf("LoadXGB = %v, want ErrBadModel", err)
			}
		})
	}
	// Every truncation and random byte flips must error or load, never
	// crash.
	_, _, end, err := checkXGB(good[4:])
	if err != nil || end > len(good) || end < len(good)/2 {
		t.Fatalf("checkXGB on the good model: end %d of %d, %v", end, len(good), err)
	}
	for n := 0; n < end; n += 37 {
		if _, err := LoadXGB(good[:n]); err == nil {
			t.Errorf("truncated to %d bytes: loaded without error", n)
		}
	}
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 300; i++ {
		b := corrupt(func(b []byte) {
			for j := 0; j < 4; j++ {
				b[4+rng.Intn(len(b)-4)] = byte(rng.Intn(256))
			}
		})
		_, _ = LoadXGB(b)
	}
}

func TestLoadXGBDirFailsOnBadFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x@y.tpot.bin"), []byte(`{"json":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ := New(Config{})
	if _, err := m.LoadXGBDir(dir); !errors.Is(err, ErrBadModel) {
		t.Errorf("LoadXGBDir = %v, want ErrBadModel", err)
	}
}
