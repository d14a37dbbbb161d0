package schedule

import "time"

// stickyEntry remembers the model and instance that served the first stage
// of a workflow, and the predicted tokens its stages still have pending.
type stickyEntry struct {
	model    string
	instance string
	expires  time.Time
	pending  float64
}

// stickyMap is a bounded map of workflows with a TTL. Not safe for
// concurrent use (the Core's lock guards it).
type stickyMap struct {
	ttl time.Duration
	max int
	m   map[string]*stickyEntry
}

func newStickyMap(ttl time.Duration, max int) *stickyMap {
	return &stickyMap{ttl: ttl, max: max, m: map[string]*stickyEntry{}}
}

// get returns the live entry of a workflow, or nil.
func (s *stickyMap) get(id string, now time.Time) *stickyEntry {
	if id == "" {
		return nil
	}
	e := s.m[id]
	if e == nil {
		return nil
	}
	if now.After(e.expires) && e.pending <= 0 {
		delete(s.m, id)
		return nil
	}
	return e
}

// put records the choice of a workflow's first stage. When the map is
// full, expired entries are swept; if none expired, an arbitrary idle
// entry is dropped.
func (s *stickyMap) put(id, model, instance string, now time.Time) *stickyEntry {
	if len(s.m) >= s.max {
		for k, e := range s.m {
			if now.After(e.expires) && e.pending <= 0 {
				delete(s.m, k)
			}
		}
		for k, e := range s.m {
			if len(s.m) < s.max {
				break
			}
			if e.pending <= 0 {
				delete(s.m, k)
			}
		}
	}
	e := &stickyEntry{model: model, instance: instance, expires: now.Add(s.ttl)}
	s.m[id] = e
	return e
}

// len returns the number of remembered workflows.
func (s *stickyMap) len() int { return len(s.m) }
