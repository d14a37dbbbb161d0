package billing

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ledger is the durable store the meter writes to. pgstore and sqlitestore
// implement it.
type Ledger interface {
	// Insert writes evs in one transaction, skipping request ids that are
	// already stored (also duplicates inside evs), and returns the request
	// ids it inserted. Only the meter's flusher goroutine calls it. On error
	// nothing may be assumed about what was written.
	Insert(ctx context.Context, evs []UsageEvent) (inserted []string, err error)
	// PeriodSpend returns the billed totals per tenant and key of the
	// events that finished at or after since.
	PeriodSpend(ctx context.Context, since time.Time) ([]PeriodSpend, error)
}

// Config configures the Meter.
type Config struct {
	// Buffer is how many events wait in memory for the flusher; when it is
	// full Record appends to the spill file instead of blocking.
	Buffer int
	// Batch is the largest number of events written in one transaction.
	Batch int
	// FlushInterval is how long a writer keeps collecting after the first
	// event of a batch before it commits: a transaction holds every event
	// recorded within FlushInterval (or Batch events, whichever comes
	// first) instead of one per request. 0 writes whatever is queued at
	// once (one transaction per event at light load).
	FlushInterval time.Duration
	// Writers is the number of flusher goroutines (each with its own
	// transaction in flight).
	Writers int
	// ReplayInterval is how often spilled events are read back.
	ReplayInterval time.Duration
	// SpendRefresh is how often the month's spend is reloaded from the
	// ledger into the Guard, so budgets count what other replicas served.
	SpendRefresh time.Duration
	// SpillDir is the directory of the append-only spill files (the data
	// dir); required.
	SpillDir string
	// MinBackoff and MaxBackoff bound the exponential retry delay while
	// the database is unreachable.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// ShutdownTimeout bounds the final flush when Run's context ends;
	// whatever cannot be written by then is spilled and replayed by the
	// next start.
	ShutdownTimeout time.Duration
	// Pricing turns an event's instance cost and tokens into its billed
	// amount.
	Pricing Pricing
}

// DefaultConfig returns the defaults; SpillDir must still be set.
func DefaultConfig() Config {
	return Config{
		Buffer:          65536,
		Batch:           5000,
		FlushInterval:   10 * time.Millisecond,
		Writers:         2,
		ReplayInterval:  250 * time.Millisecond,
		SpendRefresh:    30 * time.Second,
		MinBackoff:      50 * time.Millisecond,
		MaxBackoff:      10 * time.Second,
		ShutdownTimeout: 15 * time.Second,
		Pricing:         DefaultPricing(),
	}
}

// Validate reports a setting the meter cannot run with.
func (c Config) Validate() error {
	switch {
	case c.Buffer < 1:
		return errors.New("billing: Buffer must be ≥ 1")
	case c.Batch < 1:
		return errors.New("billing: Batch must be ≥ 1")
	case c.Writers < 1:
		return errors.New("billing: Writers must be ≥ 1")
	case c.FlushInterval < 0:
		return errors.New("billing: FlushInterval must be ≥ 0")
	case c.ReplayInterval <= 0 || c.SpendRefresh <= 0:
		return errors.New("billing: ReplayInterval and SpendRefresh must be > 0")
	case c.SpillDir == "":
		return errors.New("billing: SpillDir is required (the data directory)")
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return errors.New("billing: need 0 < MinBackoff ≤ MaxBackoff")
	case c.ShutdownTimeout <= 0:
		return errors.New("billing: ShutdownTimeout must be > 0")
	}
	return c.Pricing.Validate()
}

// MeterStats counts what the meter did since it was built.
type MeterStats struct {
	Recorded   int64 // Record calls
	Written    int64 // rows the ledger inserted
	Duplicates int64 // events skipped because their request id was stored
	Spilled    int64 // events appended to the spill file
	Replayed   int64 // events read back from spill files
	Lost       int64 // events that could not even be spilled (disk error)
	// Refused counts events whose cost or billed amount was refused
	// (NaN, ±Inf, negative, overflowing) and metered as 0.
	Refused int64
}

// Meter takes usage events from the inference path without blocking and
// writes them to the Ledger in batches from one flusher goroutine owned by
// Run. See README.md for the guarantees.
type Meter struct {
	cfg    Config
	ledger Ledger
	guard  *Guard
	log    *slog.Logger
	clock  Clock

	ch     chan UsageEvent
	mu     sync.RWMutex // Record holds R while sending; shutdown holds W to close
	closed bool

	spillMu  sync.Mutex
	spillF   *os.File
	spillN   int // events in the active spill file
	spillSeq int64

	// loadMu orders spend reloads against writes: a write attempt holds R
	// from Insert through settling the Guard, a reload holds W from
	// reading the ledger's totals through replacing the Guard's ledger
	// part, so no commit of this process lands between the two. loadGen
	// counts reloads (written under W, read under R or W).
	loadMu  sync.RWMutex
	loadGen uint64

	// replayMarks records, per replay file (owned by the goroutine that
	// replays: the first writer, then shutdown), how far this process
	// wrote and settled it, so an interrupted replay resumes there.
	replayMarks map[string]replayMark

	recorded, written, dups, spilled, replayed, lost, refused atomic.Int64
}

// unsure is the load generation at a batch's first failed write attempt,
// whose commit may have happened even though the answer was an error; 0
// means no attempt failed.
type unsure uint64

// failedBatch is a batch a writer could not write before Run's context
// ended, with its uncertainty.
type failedBatch struct {
	evs []UsageEvent
	u   unsure
}

// replayMark is how far a replay file got: its first done events are
// committed and settled; u is the uncertainty of the batch after them.
type replayMark struct {
	done int
	u    unsure
}

// Spill file names in SpillDir. Events in active and replay files were
// booked into the Guard by this process; leftover files come from an
// earlier process and are not.
const (
	spillActive   = "meter-spill.jsonl"
	replayPrefix  = "meter-replay-"
	leftoverPrefx = "meter-leftover-"
)

// NewMeter builds a meter. Spill files an earlier process left in
// cfg.SpillDir are adopted and written by Run before anything else. log and
// clock may be nil.
func NewMeter(cfg Config, ledger Ledger, guard *Guard, log *slog.Logger, clock Clock) (*Meter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ledger == nil || guard == nil {
		return nil, errors.New("billing: meter needs a ledger and a guard")
	}
	if log == nil {
		log = slog.Default()
	}
	if clock == nil {
		clock = wallClock{}
	}
	if err := os.MkdirAll(cfg.SpillDir, 0o700); err != nil {
		return nil, fmt.Errorf("billing: spill dir: %w", err)
	}
	m := &Meter{cfg: cfg, ledger: ledger, guard: guard, log: log, clock: clock,
		ch: make(chan UsageEvent, cfg.Buffer), loadGen: 1, replayMarks: map[string]replayMark{}}
	if err := m.adoptLeftovers(); err != nil {
		return nil, err
	}
	return m, nil
}

// adoptLeftovers renames the spill files of an earlier process so they are
// replayed without booking their spend twice (the ledger load covers them).
func (m *Meter) adoptLeftovers() error {
	names, err := m.spillFiles(spillActive, replayPrefix)
	if err != nil {
		return err
	}
	for _, n := range names {
		m.spillSeq++
		to := filepath.Join(m.cfg.SpillDir, fmt.Sprintf("%s%d-%d.jsonl", leftoverPrefx, time.Now().UnixNano(), m.spillSeq))
		if err := os.Rename(filepath.Join(m.cfg.SpillDir, n), to); err != nil {
			return fmt.Errorf("billing: adopt spill file: %w", err)
		}
	}
	return nil
}

// Record hands one served request to the meter. It never blocks and never
// touches the database: it prices the event, books its spend in the Guard
// and queues it; when the queue is full (database slow or down) the event
// is appended to the spill file. Call it exactly once per request id.
// Events without FinishedAt get the current time; without a RequestID a
// random one.
func (m *Meter) Record(ev UsageEvent) {
	m.recorded.Add(1)
	if ev.FinishedAt.IsZero() {
		ev.FinishedAt = m.clock.Now()
	}
	if ev.StartedAt.IsZero() {
		ev.StartedAt = ev.FinishedAt.Add(-ev.E2E)
	}
	if ev.RequestID == "" {
		ev.RequestID = randomID()
	}
	if err := m.cfg.Pricing.Price(&ev); err != nil {
		m.refused.Add(1)
		m.log.Error("billing: refusing a non-finite or out-of-range amount; metering it as 0",
			slog.String("request_id", ev.RequestID), slog.String("tenant_id", ev.TenantID),
			slog.String("instance_id", ev.InstanceID), slog.Any("err", err))
	}
	m.guard.book(&ev)
	m.mu.RLock()
	if !m.closed {
		select {
		case m.ch <- ev:
			m.mu.RUnlock()
			return
		default:
		}
	}
	m.mu.RUnlock()
	m.spill([]UsageEvent{ev})
}

// Stats returns the meter's counters.
func (m *Meter) Stats() MeterStats {
	return MeterStats{
		Recorded: m.recorded.Load(), Written: m.written.Load(), Duplicates: m.dups.Load(),
		Spilled: m.spilled.Load(), Replayed: m.replayed.Load(), Lost: m.lost.Load(),
		Refused: m.refused.Load(),
	}
}

// Run owns the flushers: it writes spill files left by an earlier process,
// loads this month's spend into the Guard, then writes queued events in
// batches, replays spilled ones and reloads the spend every SpendRefresh
// until ctx ends. Then it writes
// everything still queued (bounded by ShutdownTimeout; the rest is spilled
// for the next start) and returns. Call it once.
func (m *Meter) Run(ctx context.Context) error {
	if err := m.replayFiles(ctx, leftoverPrefx); err != nil {
		return m.shutdown(nil)
	}
	if err := m.loadSpend(ctx); err != nil {
		return m.shutdown(nil)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []failedBatch
	)
	refreshed := make(chan struct{})
	go func() { defer close(refreshed); m.refresher(ctx) }()
	for w := range m.cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if left := m.writer(ctx, w == 0); len(left.evs) > 0 {
				mu.Lock()
				failed = append(failed, left)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	<-refreshed
	return m.shutdown(failed)
}

// refresher reloads the period spend every SpendRefresh until ctx ends. It
// is its own goroutine so that a writer stuck retrying a batch never holds
// the reloads up (a reload waits only for the write attempt in progress).
func (m *Meter) refresher(ctx context.Context) {
	r := time.NewTicker(m.cfg.SpendRefresh)
	defer r.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.C:
			if err := m.reloadSpend(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("billing: reload period spend", slog.Any("err", err))
			}
		}
	}
}

// writer is one flusher goroutine: it takes the events recorded within
// FlushInterval of the first one (up to Batch) and writes them in one
// transaction; the first writer also replays
// spill files. It returns when ctx ends, with the batch it could not write.
func (m *Meter) writer(ctx context.Context, first bool) failedBatch {
	var tick <-chan time.Time
	if first {
		t := time.NewTicker(m.cfg.ReplayInterval)
		defer t.Stop()
		tick = t.C
	}
	batch := make([]UsageEvent, 0, m.cfg.Batch)
	var linger *time.Timer
	if m.cfg.FlushInterval > 0 {
		linger = time.NewTimer(time.Hour)
		linger.Stop()
		defer linger.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return failedBatch{}
		case ev := <-m.ch:
			batch = m.collect(ctx, linger, append(batch[:0], ev))
			if u, err := m.write(ctx, batch, true, 0); err != nil {
				return failedBatch{evs: batch, u: u}
			}
		case <-tick:
			if err := m.replay(ctx); err != nil {
				return failedBatch{}
			}
		}
	}
}

// collect adds events to batch until it holds Batch events or
// FlushInterval has passed since its first event (or ctx ends). linger is
// the writer's timer, nil when FlushInterval is 0 (take what is queued).
func (m *Meter) collect(ctx context.Context, linger *time.Timer, batch []UsageEvent) []UsageEvent {
	batch = m.fill(batch)
	if linger == nil || len(batch) >= m.cfg.Batch {
		return batch
	}
	linger.Reset(m.cfg.FlushInterval)
	defer linger.Stop()
	for len(batch) < m.cfg.Batch {
		select {
		case ev := <-m.ch:
			batch = m.fill(append(batch, ev))
		case <-linger.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// fill adds queued events to batch without waiting, up to Batch.
func (m *Meter) fill(batch []UsageEvent) []UsageEvent {
	for len(batch) < m.cfg.Batch {
		select {
		case ev := <-m.ch:
			batch = append(batch, ev)
		default:
			return batch
		}
	}
	return batch
}

func (m *Meter) loadSpend(ctx context.Context) error {
	return m.retry(ctx, "load period spend", func() error { return m.reloadSpend(ctx) })
}

// reloadSpend replaces the Guard's ledger part with the ledger's totals
// of the current month. It holds loadMu's write side, so no write of this
// process commits between reading the totals and installing them.
func (m *Meter) reloadSpend(ctx context.Context) error {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	period := PeriodStart(m.clock.Now())
	rows, err := m.ledger.PeriodSpend(ctx, period)
	if err != nil {
		return err
	}
	m.guard.load(period, rows)
	m.loadGen++
	return nil
}

// write inserts batch, retrying with backoff until it succeeds or ctx ends,
// then settles each event in the Guard; on error it returns the batch's
// uncertainty for the caller's next write of it. booked says the events
// were booked by this process's Record; u is the batch's uncertainty from
// an earlier write (0 for a fresh batch). An event the insert did not
// report is a duplicate — unless an earlier attempt failed: its outcome is
// unknown, so the event may be this batch's own row and, when no reload
// has read the ledger since that attempt, is counted as stored (a reload
// after it already counted the row; the next reload corrects a true
// duplicate).
func (m *Meter) write(ctx context.Context, batch []UsageEvent, booked bool, u unsure) (unsure, error) {
	err := m.retry(ctx, "write usage batch", func() error {
		m.loadMu.RLock()
		defer m.loadMu.RUnlock()
		ids, err := m.ledger.Insert(ctx, batch)
		if err != nil {
			if u == 0 {
				u = unsure(m.loadGen)
			}
			return err
		}
		m.settle(batch, ids, booked, booked && u != 0 && uint64(u) == m.loadGen)
		return nil
	})
	return u, err
}

// settle moves a written batch's events in the Guard: an inserted event
// counts as stored, one the insert skipped counts as stored only when
// ownUnreported (see write). The caller holds loadMu.
func (m *Meter) settle(batch []UsageEvent, inserted []string, booked, ownUnreported bool) {
	m.written.Add(int64(len(inserted)))
	m.dups.Add(int64(len(batch) - len(inserted)))
	fresh := make(map[string]int, len(inserted))
	for _, id := range inserted {
		fresh[id]++
	}
	for i := range batch {
		ev := &batch[i]
		stored := fresh[ev.RequestID] > 0
		if stored {
			fresh[ev.RequestID]--
		}
		m.guard.settle(ev, booked, stored || ownUnreported)
	}
}

// retry runs fn until it succeeds, sleeping MinBackoff, 2×, 4×… up to
// MaxBackoff between attempts; it returns ctx's error when ctx ends first.
func (m *Meter) retry(ctx context.Context, what string, fn func() error) error {
	backoff := m.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			if attempt > 1 {
				m.log.Info("billing: database reachable again", slog.String("op", what), slog.Int("attempts", attempt))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.log.Warn("billing: retrying", slog.String("op", what), slog.Int("attempt", attempt),
			slog.Duration("backoff", backoff), slog.Any("err", err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, m.cfg.MaxBackoff)
	}
}

// spill appends evs to the active spill file, one JSON object a line.
func (m *Meter) spill(evs []UsageEvent) {
	m.spillMu.Lock()
	defer m.spillMu.Unlock()
	if m.spillF == nil {
		f, err := os.OpenFile(filepath.Join(m.cfg.SpillDir, spillActive), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			m.lost.Add(int64(len(evs)))
			m.log.Error("billing: cannot open spill file; usage events lost", slog.Int("events", len(evs)), slog.Any("err", err))
			return
		}
		m.spillF = f
	}
	var buf []byte
	for i := range evs {
		b, err := json.Marshal(&evs[i])
		if err != nil { // cannot happen for UsageEvent
			m.lost.Add(1)
			continue
		}
		buf = append(append(buf, b...), '\n')
	}
	// One write per call: a crash leaves at most a torn last line, which
	// replay skips.
	if _, err := m.spillF.Write(buf); err != nil {
		m.lost.Add(int64(len(evs)))
		m.log.Error("billing: spill write failed; usage events lost", slog.Int("events", len(evs)), slog.Any("err", err))
		return
	}
	m.spillN += len(evs)
	m.spilled.Add(int64(len(evs)))
}

// rotate closes the active spill file and renames it for replay, so new
// spills go to a fresh file while it is read back.
func (m *Meter) rotate() error {
	m.spillMu.Lock()
	defer m.spillMu.Unlock()
	if m.spillN == 0 {
		return nil
	}
	if err := m.spillF.Close(); err != nil {
		m.log.Warn("billing: close spill file", slog.Any("err", err))
	}
	m.spillF, m.spillN = nil, 0
	m.spillSeq++
	to := filepath.Join(m.cfg.SpillDir, fmt.Sprintf("%s%d-%d.jsonl", replayPrefix, time.Now().UnixNano(), m.spillSeq))
	if err := os.Rename(filepath.Join(m.cfg.SpillDir, spillActive), to); err != nil {
		return fmt.Errorf("billing: rotate spill file: %w", err)
	}
	return nil
}

// replay rotates the active spill file and writes every replay file.
func (m *Meter) replay(ctx context.Context) error {
	if err := m.rotate(); err != nil {
		m.log.Error("billing: spill rotation failed", slog.Any("err", err))
		return nil
	}
	return m.replayFiles(ctx, replayPrefix)
}

// spillFiles lists the files in SpillDir whose names start with one of
// prefixes, oldest first.
func (m *Meter) spillFiles(prefixes ...string) ([]string, error) {
	entries, err := os.ReadDir(m.cfg.SpillDir)
	if err != nil {
		return nil, fmt.Errorf("billing: read spill dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		for _, p := range prefixes {
			if !e.IsDir() && strings.HasPrefix(e.Name(), p) {
				out = append(out, e.Name())
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return spillOrder(out[i]) < spillOrder(out[j]) })
	return out, nil
}

// spillOrder extracts the creation stamp from a rotated file name.
func spillOrder(name string) int64 {
	s := strings.TrimSuffix(name, ".jsonl")
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		n, _ := strconv.ParseInt(s[i+1:], 10, 64)
		return n
	}
	return 0
}

// replayFiles writes the events of every file with prefix and removes each
// file once all its events are in the ledger. It returns ctx's error when
// ctx ends first (the file stays for later).
func (m *Meter) replayFiles(ctx context.Context, prefix string) error {
	names, err := m.spillFiles(prefix)
	if err != nil {
		m.log.Error("billing: list spill files", slog.Any("err", err))
		return nil
	}
	booked := prefix == replayPrefix
	for _, n := range names {
		if err := m.replayFile(ctx, filepath.Join(m.cfg.SpillDir, n), booked); err != nil {
			return err
		}
	}
	return nil
}

// replayFile writes path's events in batches, resuming after the events an
// earlier, interrupted replay of it by this process wrote and settled (the
// file does not change once rotated), so no event is settled twice.
func (m *Meter) replayFile(ctx context.Context, path string, booked bool) error {
	f, err := os.Open(path)
	if err != nil {
		m.log.Error("billing: open spill file", slog.String("path", path), slog.Any("err", err))
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	mark := m.replayMarks[path]
	batch := make([]UsageEvent, 0, m.cfg.Batch)
	seen := 0 // decoded events before batch
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		u, err := m.write(ctx, batch, booked, mark.u)
		if err != nil {
			m.replayMarks[path] = replayMark{done: mark.done, u: u}
			return err
		}
		m.replayed.Add(int64(len(batch)))
		mark = replayMark{done: mark.done + len(batch)}
		m.replayMarks[path] = mark
		batch = batch[:0]
		return nil
	}
	for sc.Scan() {
		ev, err := decodeSpillLine(sc.Bytes())
		if err != nil {
			m.log.Warn("billing: skipping torn spill line", slog.String("path", path), slog.Any("err", err))
			continue
		}
		if seen++; seen <= mark.done {
			continue
		}
		batch = append(batch, ev)
		if len(batch) == m.cfg.Batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		m.log.Error("billing: read spill file", slog.String("path", path), slog.Any("err", err))
	}
	if err := flush(); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		m.log.Error("billing: remove replayed spill file", slog.String("path", path), slog.Any("err", err))
		return nil // the mark stays: a later replay skips the settled events
	}
	delete(m.replayMarks, path)
	return nil
}

// shutdown closes the queue, then writes the writers' failed batches
// (with their uncertainty), everything queued and this process's replay
// files within ShutdownTimeout; what is left is spilled for the next
// start.
func (m *Meter) shutdown(failed []failedBatch) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	var queued []UsageEvent
	for {
		select {
		case ev := <-m.ch:
			queued = append(queued, ev)
			continue
		default:
		}
		break
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownTimeout)
	defer cancel()
	var rest []UsageEvent
	for _, fb := range failed {
		if len(rest) == 0 {
			rest = m.writeAll(ctx, fb.evs, fb.u)
		} else {
			rest = append(rest, fb.evs...)
		}
	}
	if len(rest) == 0 {
		rest = m.writeAll(ctx, queued, 0)
	} else {
		rest = append(rest, queued...)
	}
	if len(rest) > 0 {
		m.log.Error("billing: database unreachable at shutdown; spilling usage events for the next start",
			slog.Int("events", len(rest)))
		m.spill(rest)
	}
	if ctx.Err() == nil {
		_ = m.replay(ctx)
	}
	m.spillMu.Lock()
	defer m.spillMu.Unlock()
	if m.spillF != nil {
		if err := m.spillF.Sync(); err != nil {
			m.log.Error("billing: sync spill file", slog.Any("err", err))
		}
	}
	return nil
}

// writeAll writes booked evs in batches (the first with uncertainty u) and
// returns the events it could not write before ctx ended.
func (m *Meter) writeAll(ctx context.Context, evs []UsageEvent, u unsure) []UsageEvent {
	for len(evs) > 0 {
		n := min(len(evs), m.cfg.Batch)
		if _, err := m.write(ctx, evs[:n], true, u); err != nil {
			return evs
		}
		evs, u = evs[n:], 0
	}
	return nil
}

// legacySpill holds the float money fields of spill lines written before
// money became integers.
type legacySpill struct {
	CostUSD   float64
	BilledUSD float64
}

// decodeSpillLine parses one spill line. Lines from before integer money
// carry CostUSD/BilledUSD floats; they are converted (a bad amount becomes
// 0 — a float JSON number is always finite, so only negative or huge ones).
func decodeSpillLine(line []byte) (UsageEvent, error) {
	var ev UsageEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return ev, fmt.Errorf("decode spill line: %w", err)
	}
	if ev.RequestID == "" {
		return ev, errors.New("decode spill line: no request id")
	}
	if ev.CostUSD != 0 || bytes.Contains(line, []byte(`"BilledUSD"`)) {
		var old legacySpill
		_ = json.Unmarshal(line, &old) // the line parsed above
		if ev.Cost == 0 {
			ev.Cost, _ = NanoFromUSD(old.CostUSD)
		}
		if ev.Billed == 0 {
			ev.Billed, _ = NanoFromUSD(old.BilledUSD)
		}
	}
	ev.CostUSD = 0
	ev.Cost, ev.Billed = max(ev.Cost, 0), max(ev.Billed, 0)
	return ev, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}
