package quality

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Syncer is implemented by a Persister whose uploads other replicas can
// change (routing/quality/sqlstore on Postgres): Follow compares what it
// stores with what this replica serves.
type Syncer interface {
	// Stamps returns the upload time of every stored upload of a tenant
	// ("" for all tenants), by cluster.
	Stamps(ctx context.Context, tenantID string) (map[string]time.Time, error)
	// Get returns one cluster's stored upload, false when there is none.
	Get(ctx context.Context, clusterID string) (Saved, bool, error)
}

// syncAll asks Follow to compare every tenant's uploads.
const syncAll = "\x00all"

// Changed tells the store that a tenant's stored uploads may have changed
// in another replica (serve feeds it the change feed, Postgres NOTIFY);
// "" means any tenant's (the feed reconnected). It never blocks: Follow
// does the work.
func (s *Store) Changed(tenantID string) {
	if tenantID == "" {
		tenantID = syncAll
	}
	select {
	case s.syncs <- tenantID:
	default: // a burst: compare everything once
		select {
		case s.syncs <- syncAll:
		default:
		}
	}
}

// Follow applies Changed notifications until ctx ends: a cluster whose
// stored upload is newer than the one served here is rebuilt from it, one
// whose upload is gone here too is dropped — so an upload or delete taken by
// another replica reaches this one without a restart. Without a Syncer
// persister it only waits for ctx.
func (s *Store) Follow(ctx context.Context) error {
	sy, ok := s.persist.(Syncer)
	for {
		select {
		case <-ctx.Done():
			return nil
		case t := <-s.syncs:
			if !ok {
				continue
			}
			if t == syncAll {
				t = ""
			}
			if err := s.sync(ctx, sy, t); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "quality: following another replica's upload failed", slog.Any("err", err))
			}
		}
	}
}

// sync brings one tenant's clusters (all for "") in line with the store.
func (s *Store) sync(ctx context.Context, sy Syncer, tenantID string) error {
	stamps, err := sy.Stamps(ctx, tenantID)
	if err != nil {
		return err
	}
	served := map[string]time.Time{} // this replica's uploads of the tenant
	s.mu.RLock()
	for id, e := range s.clusters {
		e.mu.Lock()
		if at := e.status.UploadedAt; at != nil && (tenantID == "" || e.tenantID == tenantID) {
			served[id] = *at
		}
		e.mu.Unlock()
	}
	s.mu.RUnlock()
	for id, at := range stamps {
		if cur, ok := served[id]; ok && cur.Equal(at) {
			continue
		}
		sv, ok, err := sy.Get(ctx, id)
		if err != nil || !ok {
			if err != nil {
				return err
			}
			continue // deleted meanwhile: the next notification says so
		}
		if err := s.restoreOne(ctx, sv); err != nil {
			return fmt.Errorf("cluster %s: %w", id, err)
		}
		s.log.InfoContext(ctx, "quality data changed by another replica; rebuilding", slog.String("cluster", id))
	}
	for id := range served {
		if _, ok := stamps[id]; !ok {
			s.forget(id)
			s.log.InfoContext(ctx, "quality data deleted by another replica; dropped", slog.String("cluster", id))
		}
	}
	return nil
}
