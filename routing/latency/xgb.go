package latency

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dmitryikh/leaves"
	"github.com/routebalance/routebalance/routing"
)

// XGBFeatures is the column order of the trained models, the same as
// scripts/train_tpot.py's FEATURES.
var xgbFeatureNames = [...]string{"running", "waiting", "kv_usage", "pending_decode_tokens", "prompt_tokens"}

// ErrBadModel is wrapped by every error about a model file that is not a
// usable XGBoost 1.7 legacy binary regression model.
var ErrBadModel = errors.New("latency: bad xgboost model")

// XGB is a tier's pair of XGBoost models (either may be nil) evaluated
// with leaves. It implements Predictor and is safe for concurrent use.
type XGB struct {
	tpot, ttft *leaves.Ensemble
	bufs       sync.Pool // *xgbBuf: leaves' slice arguments escape
}

var _ Predictor = (*XGB)(nil)

// xgbRow lays out a Load in the trained column order.
func xgbRow(l routing.Load) [len(xgbFeatureNames)]float64 {
	return [...]float64{l.Running, l.Waiting, l.KVUsage, l.PendingDecodeTokens, l.PromptTokens}
}

// PredictTPOT returns the TPOT model's prediction, ok=false without one.
func (x *XGB) PredictTPOT(l routing.Load) (float64, bool) {
	if x == nil || x.tpot == nil {
		return 0, false
	}
	return x.predict(x.tpot, l), true
}

type xgbBuf struct {
	row [len(xgbFeatureNames)]float64
	out [1]float64
}

func (x *XGB) predict(e *leaves.Ensemble, l routing.Load) float64 {
	b, _ := x.bufs.Get().(*xgbBuf)
	if b == nil {
		b = new(xgbBuf)
	}
	b.row = xgbRow(l)
	v := math.NaN() // "no opinion" on error
	if err := e.Predict(b.row[:], 0, b.out[:]); err == nil {
		v = b.out[0]
	}
	x.bufs.Put(b)
	return v
}

// PredictTTFT returns the TTFT model's prediction, ok=false without one.
func (x *XGB) PredictTTFT(l routing.Load) (float64, bool) {
	if x == nil || x.ttft == nil {
		return 0, false
	}
	return x.predict(x.ttft, l), true
}

// LoadXGBDir loads every "<tier>.tpot.bin" and "<tier>.ttft.bin" in dir
// (as written by scripts/train_tpot.py) and attaches them to their tiers.
// It returns the tiers loaded; any bad file fails the whole load.
func (m *Models) LoadXGBDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	preds := map[string]*XGB{}
	var tiers []string
	for _, e := range ents {
		name := e.Name()
		var tier, kind string
		switch {
		case strings.HasSuffix(name, ".tpot.bin"):
			tier, kind = strings.TrimSuffix(name, ".tpot.bin"), "tpot"
		case strings.HasSuffix(name, ".ttft.bin"):
			tier, kind = strings.TrimSuffix(name, ".ttft.bin"), "ttft"
		default:
			continue
		}
		ens, err := LoadXGBFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		p := preds[tier]
		if p == nil {
			p = &XGB{}
			preds[tier] = p
			tiers = append(tiers, tier)
		}
		if kind == "tpot" {
			p.tpot = ens
		} else {
			p.ttft = ens
		}
	}
	for tier, p := range preds {
		m.SetPredictor(tier, p)
	}
	return tiers, nil
}

// LoadXGBFile reads one model file; see LoadXGB.
func LoadXGBFile(path string) (*leaves.Ensemble, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	ens, err := LoadXGB(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return ens, nil
}

// Layout of XGBoost 1.7's legacy binary model ("binf" + LearnerModelParam
// + objective + booster name + GBTreeModelParam + trees + tree_info).
const (
	xgbMagic          = "binf"
	learnerParamSize  = 136 // base_score, num_feature, num_class, 2 flags, 2 versions, reserved
	gbtreeParamSize   = 160 // num_trees, num_parallel_tree, num_feature, pad, int64, num_output_group, size_leaf_vector, 32 reserved
	outputGroupOffset = 24  // num_output_group within GBTreeModelParam
	treeParamSize     = 148 // num_roots, num_nodes, num_deleted, max_depth, num_feature, size_leaf_vector, 31 reserved
	nodeSize          = 20
	nodeStatSize      = 16
	maxTrees          = 100_000
	maxNodes          = 1 << 24
)

// regressionObjectives are the objectives whose raw margin is the
// prediction, so the model is used with loadTransformation=false.
var regressionObjectives = map[string]bool{
	"reg:squarederror": true, "reg:linear": true, "reg:absoluteerror": true, "reg:pseudohubererror": true,
}

// LoadXGB parses an XGBoost 1.7 legacy binary regression model. leaves
// cannot read 1.7's file as written (it crashes on the "binf" magic and
// on num_output_group = 0), so LoadXGB first checks the magic, walks and
// bounds-checks the whole structure, strips the magic, and sets
// num_output_group to max(1, num_class) before handing the bytes to leaves
// with loadTransformation=false. JSON and UBJSON models, other boosters,
// non-regression objectives and truncated or corrupt files return an error
// wrapping ErrBadModel; a panic inside leaves is recovered into one too.
func LoadXGB(b []byte) (ens *leaves.Ensemble, err error) {
	switch {
	case len(b) >= 1 && b[0] == '{':
		return nil, fmt.Errorf("%w: JSON/UBJSON model; save it with a .bin name (xgboost 1.7 legacy binary)", ErrBadModel)
	case len(b) < 4 || string(b[:4]) != xgbMagic:
		return nil, fmt.Errorf("%w: no %q magic (not an xgboost 1.7 legacy binary model)", ErrBadModel, xgbMagic)
	}
	body := append([]byte(nil), b[4:]...)
	gbOff, numClass, _, err := checkXGB(body)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(body[gbOff+outputGroupOffset:]) == 0 {
		binary.LittleEndian.PutUint32(body[gbOff+outputGroupOffset:], uint32(max(1, numClass)))
	}
	defer func() {
		if p := recover(); p != nil {
			ens, err = nil, fmt.Errorf("%w: leaves failed: %v", ErrBadModel, p)
		}
	}()
	ens, err = leaves.XGEnsembleFromReader(bufio.NewReader(bytes.NewReader(body)), false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadModel, err)
	}
	if ens.NFeatures() > len(xgbFeatureNames) {
		return nil, fmt.Errorf("%w: model uses %d features, the latency features are %d", ErrBadModel, ens.NFeatures(), len(xgbFeatureNames))
	}
	return ens, nil
}

// checkXGB walks the model after the magic and bounds-checks every size
// and node reference; it returns the offset of GBTreeModelParam, the
// number of classes and the file length the model needs (magic included).
func checkXGB(body []byte) (gbOff int, numClass int32, end int, err error) {
	r := &byteReader{b: body}
	param := r.take(learnerParamSize)
	if r.err != nil {
		return 0, 0, 0, fmt.Errorf("%w: truncated header", ErrBadModel)
	}
	numFeature := binary.LittleEndian.Uint32(param[4:])
	numClass = int32(binary.LittleEndian.Uint32(param[8:]))
	if numFeature == 0 || numFeature > 1<<20 || numClass < 0 || numClass > 1<<16 {
		return 0, 0, 0, fmt.Errorf("%w: implausible num_feature %d / num_class %d", ErrBadModel, numFeature, numClass)
	}
	obj := r.str()
	gbm := r.str()
	if r.err != nil {
		return 0, 0, 0, fmt.Errorf("%w: truncated names", ErrBadModel)
	}
	if gbm != "gbtree" {
		return 0, 0, 0, fmt.Errorf("%w: booster %q, want gbtree", ErrBadModel, gbm)
	}
	if !regressionObjectives[obj] {
		return 0, 0, 0, fmt.Errorf("%w: objective %q is not a plain regression objective", ErrBadModel, obj)
	}
	gbOff = r.off
	gp := r.take(gbtreeParamSize)
	if r.err != nil {
		return 0, 0, 0, fmt.Errorf("%w: truncated gbtree parameters", ErrBadModel)
	}
	numTrees := int32(binary.LittleEndian.Uint32(gp[0:]))
	if numTrees < 1 || numTrees > maxTrees {
		return 0, 0, 0, fmt.Errorf("%w: %d trees", ErrBadModel, numTrees)
	}
	for t := int32(0); t < numTrees; t++ {
		tp := r.take(treeParamSize)
		if r.err != nil {
			return 0, 0, 0, fmt.Errorf("%w: truncated tree %d", ErrBadModel, t)
		}
		nNodes := int32(binary.LittleEndian.Uint32(tp[4:]))
		leafVec := int32(binary.LittleEndian.Uint32(tp[20:]))
		if nNodes < 1 || nNodes > maxNodes {
			return 0, 0, 0, fmt.Errorf("%w: tree %d has %d nodes", ErrBadModel, t, nNodes)
		}
		nodes := r.take(int(nNodes) * nodeSize)
		r.take(int(nNodes) * nodeStatSize)
		if r.err != nil {
			return 0, 0, 0, fmt.Errorf("%w: truncated tree %d", ErrBadModel, t)
		}
		for i := 0; i < int(nNodes); i++ {
			nd := nodes[i*nodeSize:]
			left := int32(binary.LittleEndian.Uint32(nd[4:]))
			right := int32(binary.LittleEndian.Uint32(nd[8:]))
			feat := binary.LittleEndian.Uint32(nd[12:]) & 0x7fffffff
			if left == -1 {
				continue
			}
			if left <= 0 || left >= nNodes || right <= 0 || right >= nNodes || feat >= numFeature {
				return 0, 0, 0, fmt.Errorf("%w: tree %d node %d has bad children or feature", ErrBadModel, t, i)
			}
		}
		if leafVec > 0 {
			n := r.u64()
			if r.err != nil || n > uint64(len(body)) {
				return 0, 0, 0, fmt.Errorf("%w: bad leaf vector in tree %d", ErrBadModel, t)
			}
			r.take(int(n) * 4)
		}
	}
	r.take(int(numTrees) * 4) // tree_info
	if r.err != nil {
		return 0, 0, 0, fmt.Errorf("%w: truncated tree_info", ErrBadModel)
	}
	return gbOff, numClass, 4 + r.off, nil
}

// byteReader walks a byte slice, remembering the first overrun.
type byteReader struct {
	b   []byte
	off int
	err error
}

func (r *byteReader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b)-r.off {
		r.err = errors.New("short")
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *byteReader) u64() uint64 {
	s := r.take(8)
	if s == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(s)
}

func (r *byteReader) str() string {
	n := r.u64()
	if r.err != nil || n > 256 {
		r.err = errors.New("bad string")
		return ""
	}
	return string(r.take(int(n)))
}
