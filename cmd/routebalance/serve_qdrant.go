package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/routebalance/routebalance/routing/estimate"
	"github.com/routebalance/routebalance/routing/quality"
	"github.com/routebalance/routebalance/telemetry"
)

// qdrantFlags are serve's settings of the Qdrant behind the cluster
// quality indexes (routing/quality/README.md, docs/operations.md).
type qdrantFlags struct {
	url, apiKey, collection string
	timeout, cooldown       time.Duration
}

// register adds the flags to fs.
func (q *qdrantFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&q.url, "qdrant-url", env("QDRANT_URL", ""), "Qdrant gRPC URL (http://host:6334, https for TLS): cluster quality indexes are stored there and their neighbours searched there, the in-process index answering when it is unreachable; empty keeps them in process (env ROUTEBALANCE_QDRANT_URL)")
	fs.StringVar(&q.apiKey, "qdrant-api-key", env("QDRANT_API_KEY", ""), "API key sent to Qdrant (env ROUTEBALANCE_QDRANT_API_KEY)")
	fs.StringVar(&q.collection, "qdrant-collection", env("QDRANT_COLLECTION", quality.DefaultQdrantCollection), "the one Qdrant collection of every cluster's index (points carry tenant_id, cluster_id and upload payloads) (env ROUTEBALANCE_QDRANT_COLLECTION)")
	d, _ := time.ParseDuration(env("QDRANT_TIMEOUT", "50ms"))
	fs.DurationVar(&q.timeout, "qdrant-timeout", d, "bound on one neighbour search in Qdrant on the serving path; past it the in-process index answers (env ROUTEBALANCE_QDRANT_TIMEOUT)")
	c, _ := time.ParseDuration(env("QDRANT_COOLDOWN", "10s"))
	fs.DurationVar(&q.cooldown, "qdrant-cooldown", c, "after 3 consecutive failed Qdrant searches, how long the in-process index answers before Qdrant is probed again (env ROUTEBALANCE_QDRANT_COOLDOWN)")
}

// open connects to Qdrant; nil without --qdrant-url. The connection is
// lazy: a Qdrant that is down at start is the breaker's business, not a
// reason not to serve.
func (q qdrantFlags) open(ctx context.Context, log *slog.Logger) (*quality.QdrantStore, error) {
	if q.url == "" {
		return nil, nil
	}
	if q.timeout <= 0 || q.cooldown <= 0 {
		return nil, errors.New("--qdrant-timeout and --qdrant-cooldown must be positive")
	}
	qs, err := quality.OpenQdrant(ctx, quality.QdrantConfig{
		Client:       estimate.QdrantConfig{URL: q.url, APIKey: q.apiKey, Collection: q.collection},
		QueryTimeout: q.timeout,
		Breaker:      quality.BreakerConfig{Cooldown: q.cooldown},
	}, nil, log)
	if err != nil {
		return nil, fmt.Errorf("--qdrant-url: %w", err)
	}
	log.Info("cluster quality indexes in Qdrant", slog.String("url", q.url), slog.String("collection", qs.Collection()),
		slog.Duration("query_timeout", q.timeout))
	return qs, nil
}

// attachGlobalQdrant makes the operator-wide index search its Qdrant
// collection when `index build --qdrant-url` recorded one in the index
// directory and serve has --qdrant-url (the same breaker and fallback as
// the cluster indexes); otherwise it changes nothing.
func attachGlobalQdrant(ctx context.Context, qs *quality.QdrantStore, dir string, knn *estimate.KNN, log *slog.Logger) error {
	if qs == nil || knn == nil {
		return nil
	}
	man, err := estimate.ReadManifest(dir)
	if err != nil || man.Qdrant == nil {
		return err
	}
	if err := qs.AttachGlobal(ctx, knn, man.Qdrant.Collection); err != nil {
		return fmt.Errorf("--index-dir %s with --qdrant-url: %w", dir, err)
	}
	log.Info("operator-wide index searches Qdrant", slog.String("collection", man.Qdrant.Collection),
		slog.String("built_against", man.Qdrant.URL), slog.String("estimator", knn.Mode()))
	return nil
}

// qdrantStats reads the Qdrant counters for telemetry.Deps.Qdrant (nil
// without Qdrant: the series are absent).
func qdrantStats(qs *quality.QdrantStore) func() telemetry.QdrantStats {
	if qs == nil {
		return nil
	}
	return func() telemetry.QdrantStats {
		s := qs.Stats()
		return telemetry.QdrantStats{State: s.State, Opens: s.Opens, Searches: s.Searches, Errors: s.Errors,
			FallbackOpen: s.FallbackOpen, FallbackError: s.FallbackError, FallbackMissing: s.FallbackMissing}
	}
}
