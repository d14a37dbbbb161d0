package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultTask is the task whose median output length applies when a
// prompt's task is unknown or has no entry in the world model.
const DefaultTask = "default"

// ClusterFile is a simulated heterogeneous cluster: its tiers of identical
// instances, the output-length world model and the calibration targets the
// simulated world is tuned to meet. It is the JSON format of
// data/clusters/reference-13.json.
type ClusterFile struct {
	Name  string `json:"name"`
	About string `json:"about,omitempty"`
	// Tiers are the groups of identical instances, in file order. Instance
	// k of the file counts through the tiers in this order.
	Tiers []Tier `json:"tiers"`
	// TPOTModel documents the TPOT formula in words; Tier.TPOT implements it.
	TPOTModel          string             `json:"tpot_model,omitempty"`
	OutputLengths      OutputLengths      `json:"output_lengths"`
	CalibrationTargets CalibrationTargets `json:"calibration_targets"`
}

// Tier is one group of identical instances: one served model on one GPU
// type with its latency parameters and prices.
type Tier struct {
	// Model is the served model name (what /v1/models lists).
	Model string `json:"model"`
	// GPU is the GPU type, e.g. "a100-80g".
	GPU            string `json:"gpu"`
	TensorParallel int    `json:"tensor_parallel"`
	// Instances is how many identical instances the tier has.
	Instances int `json:"instances"`
	// TPOTMsLight is the decode step time in ms with one running sequence.
	TPOTMsLight float64 `json:"tpot_ms_light"`
	// TPOTLoadFactor is how many times slower a step is with max_num_seqs
	// running sequences than with one.
	TPOTLoadFactor float64 `json:"tpot_load_factor"`
	// MaxNumSeqs caps the running (decoding) sequences; more wait FCFS.
	MaxNumSeqs int `json:"max_num_seqs"`
	// TTFTOverheadMs is the fixed latency from arrival to the moment a
	// request can be scheduled (HTTP, tokenisation, scheduler queue).
	TTFTOverheadMs float64 `json:"ttft_overhead_ms"`
	// PrefillMsPer1kPromptTokens is the engine time a prefill costs per
	// 1,000 prompt tokens.
	PrefillMsPer1kPromptTokens float64 `json:"prefill_ms_per_1k_prompt_tokens"`
	// Prices in USD per one million tokens.
	PriceInPerMTok  float64 `json:"price_in_per_mtok"`
	PriceOutPerMTok float64 `json:"price_out_per_mtok"`
	// Verbosity multiplies the task's median output length for this model.
	Verbosity float64 `json:"verbosity"`
	// KVCacheTokens is the KV-cache capacity of one instance in tokens;
	// 0 means the default DefaultKVTokensPerSeq × MaxNumSeqs.
	KVCacheTokens int `json:"kv_cache_tokens,omitempty"`
	// MaxModelLen is the context length (prompt + output) in tokens; 0
	// means DefaultMaxModelLen.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// Kind is what the tier's model serves: KindChat ("" means chat) for
	// generation (chat/completions/responses), KindEmbedding for
	// /v1/embeddings only.
	Kind string `json:"kind,omitempty"`
	// Dimensions is the vector size of an embedding tier; 0 means
	// DefaultEmbeddingDimensions. Only embedding tiers may set it.
	Dimensions int `json:"dimensions,omitempty"`
}

// The kinds of model a tier serves.
const (
	// KindChat is a generative model: chat completions, completions and
	// responses.
	KindChat = "chat"
	// KindEmbedding is an embedding (pooling) model: /v1/embeddings only.
	KindEmbedding = "embedding"
)

// DefaultEmbeddingDimensions is the vector size of an embedding tier that
// does not set dimensions (all-MiniLM-L6-v2's).
const DefaultEmbeddingDimensions = 384

// IsEmbedding reports whether the tier serves embeddings.
func (t Tier) IsEmbedding() bool { return t.Kind == KindEmbedding }

// EmbeddingDims is the vector size of an embedding tier.
func (t Tier) EmbeddingDims() int {
	if t.Dimensions > 0 {
		return t.Dimensions
	}
	return DefaultEmbeddingDimensions
}

// DefaultKVTokensPerSeq sizes a tier's KV cache when the file does not:
// capacity = DefaultKVTokensPerSeq × max_num_seqs, i.e. a full batch of
// 2,048-token contexts fits exactly. It is a sizing assumption, not a GPU
// memory model.
const DefaultKVTokensPerSeq = 2048

// DefaultMaxModelLen is the context length of a tier that does not set
// max_model_len.
const DefaultMaxModelLen = 8192

// OutputLengths is the world model of output lengths: a lognormal around
// the task's median times the model's verbosity.
type OutputLengths struct {
	About string `json:"about,omitempty"`
	// Sigma is the lognormal shape σ (standard deviation of ln length).
	Sigma float64 `json:"sigma"`
	// MedianTokensByTask maps a task to its median output tokens before the
	// verbosity factor; it must have a "default" entry.
	MedianTokensByTask map[string]float64 `json:"median_tokens_by_task"`
}

// CalibrationTargets are properties the simulated world should show (not
// properties of the scheduler). Values are human-readable ranges such as
// "about 2-4" or "30 or more (collapse)"; ParseTarget reads them.
type CalibrationTargets struct {
	About string `json:"about,omitempty"`
	// QualityOnlyMeanE2ES maps a load point ("lambda_6" = 6 req/s) to the
	// expected mean end-to-end latency in seconds of the quality-only policy.
	QualityOnlyMeanE2ES map[string]string `json:"quality_only_mean_e2e_s,omitempty"`
	// BestPolicyCapacityReqS is the sustainable request rate of the best
	// policy.
	BestPolicyCapacityReqS string `json:"best_policy_capacity_req_s,omitempty"`
}

// Target is a numeric range read from a calibration target; Hi is +Inf for
// open ranges ("30 or more").
type Target struct {
	Lo, Hi float64
}

// Contains reports whether v lies in [Lo, Hi].
func (t Target) Contains(v float64) bool { return v >= t.Lo && v <= t.Hi }

var (
	rangeRe = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*[-–]\s*(\d+(?:\.\d+)?)`)
	moreRe  = regexp.MustCompile(`(\d+(?:\.\d+)?)\s+or\s+more`)
	numRe   = regexp.MustCompile(`(\d+(?:\.\d+)?)`)
)

// ParseTarget reads a calibration target: "about 2-4" is [2,4], "30 or
// more (collapse)" is [30,+Inf), "about 25" is [25,25].
func ParseTarget(s string) (Target, error) {
	if m := rangeRe.FindStringSubmatch(s); m != nil {
		lo, _ := strconv.ParseFloat(m[1], 64)
		hi, _ := strconv.ParseFloat(m[2], 64)
		if lo > hi {
			return Target{}, fmt.Errorf("calibration target %q: range is reversed", s)
		}
		return Target{Lo: lo, Hi: hi}, nil
	}
	if m := moreRe.FindStringSubmatch(s); m != nil {
		lo, _ := strconv.ParseFloat(m[1], 64)
		return Target{Lo: lo, Hi: math.Inf(1)}, nil
	}
	if m := numRe.FindStringSubmatch(s); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		return Target{Lo: v, Hi: v}, nil
	}
	return Target{}, fmt.Errorf("calibration target %q: no number in it", s)
}

// LoadCluster reads and validates a cluster file.
func LoadCluster(path string) (*ClusterFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster file: %w", err)
	}
	f, err := ParseCluster(b)
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", path, err)
	}
	return f, nil
}

// ParseCluster decodes and validates a cluster file's JSON. Unknown fields
// are an error so a misspelt parameter does not silently take its default.
func ParseCluster(b []byte) (*ClusterFile, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f ClusterFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	f.ApplyDefaults()
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// ErrInvalidCluster is wrapped by every validation error of a cluster file.
var ErrInvalidCluster = errors.New("invalid cluster file")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidCluster, fmt.Sprintf(format, args...))
}

// ApplyDefaults fills the latency parameters an embedding tier may leave
// out (it has no decode phase to speak of): tpot_load_factor 1,
// max_num_seqs 256, verbosity 1. Chat tiers are left alone: every one of
// their parameters shapes the simulated world and must be written down.
func (f *ClusterFile) ApplyDefaults() {
	for i := range f.Tiers {
		t := &f.Tiers[i]
		if !t.IsEmbedding() {
			continue
		}
		if t.TPOTLoadFactor == 0 {
			t.TPOTLoadFactor = 1
		}
		if t.MaxNumSeqs == 0 {
			t.MaxNumSeqs = 256
		}
		if t.Verbosity == 0 {
			t.Verbosity = 1
		}
	}
}

// Validate checks every parameter the instance model uses.
func (f *ClusterFile) Validate() error {
	if len(f.Tiers) == 0 {
		return invalid("no tiers")
	}
	seen := map[string]bool{}
	for i := range f.Tiers {
		t := &f.Tiers[i]
		if err := t.Validate(); err != nil {
			return fmt.Errorf("tiers[%d]: %w", i, err)
		}
		if seen[t.Tier()] {
			return invalid("tiers[%d]: tier %s appears twice (merge the instance counts)", i, t.Tier())
		}
		seen[t.Tier()] = true
	}
	return f.OutputLengths.Validate()
}

// Validate checks the tier's parameters.
func (t Tier) Validate() error {
	switch {
	case strings.TrimSpace(t.Model) == "":
		return invalid("model is empty")
	case strings.TrimSpace(t.GPU) == "":
		return invalid("%s: gpu is empty", t.Model)
	case t.Instances < 1:
		return invalid("%s: instances must be >= 1, got %d", t.Model, t.Instances)
	case t.TensorParallel < 0:
		return invalid("%s: tensor_parallel must be >= 0, got %d", t.Model, t.TensorParallel)
	case !finite(t.TPOTMsLight) || t.TPOTMsLight < 0:
		return invalid("%s: tpot_ms_light must be a number >= 0, got %v", t.Model, t.TPOTMsLight)
	case !finite(t.TPOTLoadFactor) || t.TPOTLoadFactor < 1:
		return invalid("%s: tpot_load_factor must be >= 1, got %v", t.Model, t.TPOTLoadFactor)
	case t.MaxNumSeqs < 1:
		return invalid("%s: max_num_seqs must be >= 1, got %d", t.Model, t.MaxNumSeqs)
	case !finite(t.TTFTOverheadMs) || t.TTFTOverheadMs < 0:
		return invalid("%s: ttft_overhead_ms must be a number >= 0, got %v", t.Model, t.TTFTOverheadMs)
	case !finite(t.PrefillMsPer1kPromptTokens) || t.PrefillMsPer1kPromptTokens < 0:
		return invalid("%s: prefill_ms_per_1k_prompt_tokens must be a number >= 0, got %v", t.Model, t.PrefillMsPer1kPromptTokens)
	case !finite(t.PriceInPerMTok) || t.PriceInPerMTok < 0 || !finite(t.PriceOutPerMTok) || t.PriceOutPerMTok < 0:
		return invalid("%s: prices must be numbers >= 0", t.Model)
	case !finite(t.Verbosity) || t.Verbosity <= 0:
		return invalid("%s: verbosity must be a number > 0, got %v", t.Model, t.Verbosity)
	case t.KVCacheTokens < 0:
		return invalid("%s: kv_cache_tokens must be >= 0, got %d", t.Model, t.KVCacheTokens)
	case t.MaxModelLen < 0:
		return invalid("%s: max_model_len must be >= 0, got %d", t.Model, t.MaxModelLen)
	case t.Kind != "" && t.Kind != KindChat && t.Kind != KindEmbedding:
		return invalid("%s: kind must be %q or %q, got %q", t.Model, KindChat, KindEmbedding, t.Kind)
	case t.Dimensions < 0 || t.Dimensions > 65536:
		return invalid("%s: dimensions must be in [0, 65536], got %d", t.Model, t.Dimensions)
	case t.Dimensions > 0 && !t.IsEmbedding():
		return invalid("%s: dimensions is only for kind %q tiers", t.Model, KindEmbedding)
	}
	return nil
}

// Validate checks the output-length world model.
func (o *OutputLengths) Validate() error {
	if !finite(o.Sigma) || o.Sigma < 0 {
		return invalid("output_lengths.sigma must be a number >= 0, got %v", o.Sigma)
	}
	if _, ok := o.MedianTokensByTask[DefaultTask]; !ok {
		return invalid("output_lengths.median_tokens_by_task needs a %q entry", DefaultTask)
	}
	for task, m := range o.MedianTokensByTask {
		if !finite(m) || m < 1 {
			return invalid("output_lengths.median_tokens_by_task[%q] must be >= 1, got %v", task, m)
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Tier names the latency class: model@gpu, like routing.Instance.Tier.
func (t Tier) Tier() string { return t.Model + "@" + t.GPU }

// TPOT is the duration of one decode step with b running sequences:
// tpot_ms_light × (1 + (tpot_load_factor − 1) × min(b, max_num_seqs) / max_num_seqs).
// b < 1 is treated as 1.
func (t Tier) TPOT(b int) time.Duration {
	if b < 1 {
		b = 1
	}
	if b > t.MaxNumSeqs {
		b = t.MaxNumSeqs
	}
	ms := t.TPOTMsLight * (1 + (t.TPOTLoadFactor-1)*float64(b)/float64(t.MaxNumSeqs))
	return msDuration(ms)
}

// Prefill is the engine time of one prompt's prefill:
// prefill_ms_per_1k_prompt_tokens × promptTokens / 1000.
func (t Tier) Prefill(promptTokens int) time.Duration {
	return msDuration(t.PrefillMsPer1kPromptTokens * float64(promptTokens) / 1000)
}

// Overhead is the fixed arrival-to-schedulable latency ttft_overhead_ms.
func (t Tier) Overhead() time.Duration { return msDuration(t.TTFTOverheadMs) }

// KVCapacity is the instance's KV-cache capacity in tokens.
func (t Tier) KVCapacity() int {
	if t.KVCacheTokens > 0 {
		return t.KVCacheTokens
	}
	return DefaultKVTokensPerSeq * t.MaxNumSeqs
}

// ContextLen is the instance's max_model_len.
func (t Tier) ContextLen() int {
	if t.MaxModelLen > 0 {
		return t.MaxModelLen
	}
	return DefaultMaxModelLen
}

func msDuration(ms float64) time.Duration { return time.Duration(math.Round(ms * 1e6)) }

// InstanceSpec is one instance of a cluster file.
type InstanceSpec struct {
	// Index is k, counting through the tiers in file order from 0.
	Index int
	// ID is "<model>@<gpu>#<n>" with n counting within the tier from 0.
	ID   string
	Tier *Tier
}

// Instances lists every instance of the file, tier by tier in file order.
func (f *ClusterFile) Instances() []InstanceSpec {
	var out []InstanceSpec
	for i := range f.Tiers {
		t := &f.Tiers[i]
		for n := 0; n < t.Instances; n++ {
			out = append(out, InstanceSpec{Index: len(out), ID: fmt.Sprintf("%s#%d", t.Tier(), n), Tier: t})
		}
	}
	return out
}
