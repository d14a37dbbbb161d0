package estimate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// OpenAIConfig configures the client of an OpenAI-compatible /v1/embeddings
// endpoint (vLLM or TEI serving e.g. all-MiniLM-L6-v2).
type OpenAIConfig struct {
	// URL is the server's base URL, with or without the /v1 suffix.
	URL string
	// Model is the served embedding model name (default
	// "sentence-transformers/all-MiniLM-L6-v2").
	Model string
	// Dim is the embedding size; 0 means "learn it from the first reply"
	// (Probe does that explicitly).
	Dim int
	// APIKey is sent as a bearer token when set.
	APIKey string
	// Timeout bounds one batch request (default 10s).
	Timeout time.Duration
	// HTTPClient is the transport (default: a client without its own
	// timeout; Timeout applies per request).
	HTTPClient *http.Client
}

// Validate reports whether the configuration is usable.
func (c OpenAIConfig) Validate() error {
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("openai embedder: url must start with http:// or https://, got %q", c.URL)
	}
	if c.Dim < 0 || c.Timeout < 0 {
		return errors.New("openai embedder: dim and timeout must be ≥ 0")
	}
	return nil
}

// ErrEmbedderUnavailable wraps every failure to reach or use the embedding
// endpoint (connection refused, timeout, non-2xx reply, malformed reply).
var ErrEmbedderUnavailable = errors.New("embedding endpoint unavailable")

// OpenAI embeds through an OpenAI-compatible /v1/embeddings endpoint with
// the official openai-go client: one HTTP request per batch, no retries
// (the router would rather fall back than wait). Safe for concurrent use
// once its dimension is known.
type OpenAI struct {
	cfg    OpenAIConfig
	client openai.Client
}

var _ Embedder = (*OpenAI)(nil)

// NewOpenAI returns a client for cfg.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		cfg.Model = "sentence-transformers/all-MiniLM-L6-v2"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	base := strings.TrimRight(cfg.URL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/"),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(cfg.Timeout),
		option.WithAPIKey(cfg.APIKey),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &OpenAI{cfg: cfg, client: openai.NewClient(opts...)}, nil
}

// Dim returns the configured or probed dimension (0 before Probe when
// none was configured).
func (o *OpenAI) Dim() int { return o.cfg.Dim }

// Probe embeds one short text to learn the dimension when none was
// configured; it returns the dimension.
func (o *OpenAI) Probe(ctx context.Context) (int, error) {
	if o.cfg.Dim > 0 {
		return o.cfg.Dim, nil
	}
	vecs, err := o.call(ctx, []string{"dimension probe"})
	if err != nil {
		return 0, err
	}
	o.cfg.Dim = len(vecs[0])
	return o.cfg.Dim, nil
}

func (o *OpenAI) spec() EmbedderSpec {
	return EmbedderSpec{Kind: "openai", Dim: o.cfg.Dim, URL: o.cfg.URL, Model: o.cfg.Model}
}

// Embed sends all texts in one request and writes the L2-normalised
// vectors into dst.
func (o *OpenAI) Embed(ctx context.Context, texts []string, dst []float32) error {
	if o.cfg.Dim == 0 {
		return errors.New("openai embedder: dimension unknown; configure Dim or call Probe")
	}
	if len(dst) != len(texts)*o.cfg.Dim {
		return fmt.Errorf("openai embedder: dst has %d floats, want %d", len(dst), len(texts)*o.cfg.Dim)
	}
	if len(texts) == 0 {
		return nil
	}
	vecs, err := o.call(ctx, texts)
	if err != nil {
		return err
	}
	d := o.cfg.Dim
	for i, v := range vecs {
		if len(v) != d {
			return fmt.Errorf("%w: %s returned %d dims for input %d, want %d", ErrEmbedderUnavailable, o.cfg.URL, len(v), i, d)
		}
		row := dst[i*d : (i+1)*d]
		for j, x := range v {
			row[j] = float32(x)
		}
		normalize(row)
	}
	return nil
}

// call does one request and returns the vectors in input order.
func (o *OpenAI) call(ctx context.Context, texts []string) ([][]float64, error) {
	// Empty strings are rejected by OpenAI-compatible servers; a single
	// space embeds as "no content".
	in := texts
	for i, t := range texts {
		if t == "" {
			if &in[0] == &texts[0] {
				in = append([]string(nil), texts...)
			}
			in[i] = " "
		}
	}
	res, err := o.client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: in},
		Model:          openai.EmbeddingModel(o.cfg.Model),
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: POST %s/embeddings: %w", ErrEmbedderUnavailable, strings.TrimRight(o.cfg.URL, "/"), err)
	}
	if len(res.Data) != len(texts) {
		return nil, fmt.Errorf("%w: %s returned %d embeddings for %d inputs", ErrEmbedderUnavailable, o.cfg.URL, len(res.Data), len(texts))
	}
	out := make([][]float64, len(texts))
	for _, d := range res.Data {
		if d.Index < 0 || int(d.Index) >= len(texts) || out[d.Index] != nil {
			return nil, fmt.Errorf("%w: %s returned a bad or repeated index %d", ErrEmbedderUnavailable, o.cfg.URL, d.Index)
		}
		for _, x := range d.Embedding {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("%w: %s returned a non-finite value", ErrEmbedderUnavailable, o.cfg.URL)
			}
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}
