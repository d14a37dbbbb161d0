package main

// The chaos suite (issue 16 item 10; docs/operations.md, "Chaos suite").
// Every test runs the real `serve` in-process (runServe with its real
// shutdown path: cancelling its context is what SIGTERM does in main),
// fake vLLM upstreams on loopback (routing/proxy/vllmtest), the real
// SQLite file or a real Postgres schema, and asserts from the ledger that
// every request that reached an instance — by the X-Request-Id the
// upstreams received — is metered exactly once, and nothing else is.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/routebalance/routebalance/internal/tcpproxy"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// chaosTenant signs up on base, registers one cluster with the given
// upstreams (all serving model "m") and returns an API key.
func chaosTenant(t *testing.T, base string, ups ...*vllmtest.Server) string {
	t.Helper()
	tok := postJSON(t, base+"/api/v1/signup", "", `{"email":"chaos@example.com","password":"correct-horse-42","name":"C"}`)["access_token"].(string)
	cid := postJSON(t, base+"/api/v1/clusters", tok, `{"name":"c"}`)["id"].(string)
	for _, u := range ups {
		postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", tok, `{"base_url":"`+u.URL+`","model":"m","gpu":"l4","price_in_per_mtok":0.5,"price_out_per_mtok":1.5}`)
	}
	return postJSON(t, base+"/api/v1/keys", tok, `{"name":"k"}`)["key"].(string)
}

// outcome is what one client request saw.
type outcome struct {
	status int
	body   string
	err    error
}

// complete sends one chat completion; readChunks > 0 closes the
// connection after that many SSE lines of a stream (a client leaving).
func complete(ctx context.Context, base, key string, stream bool, readChunks int) outcome {
	body := fmt.Sprintf(`{"model":"auto","stream":%v,"messages":[{"role":"user","content":"chaos"}]}`, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Do(req)
	if err != nil {
		return outcome{err: err}
	}
	defer res.Body.Close()
	if readChunks > 0 {
		sc := bufio.NewScanner(res.Body)
		for n := 0; n < readChunks && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "data: ") {
				n++
			}
		}
		return outcome{status: res.StatusCode, body: "(left after a few chunks)"}
	}
	b, err := io.ReadAll(res.Body)
	return outcome{status: res.StatusCode, body: string(b), err: err}
}

// fire sends n requests concurrently and returns what each saw.
func fire(ctx context.Context, base, key string, n int, stream bool, readChunks int) []outcome {
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = complete(ctx, base, key, stream, readChunks)
		}()
	}
	wg.Wait()
	return out
}

// reached returns the request ids the upstreams received (a request that
// failed over reached two instances under one id).
func reached(ups ...*vllmtest.Server) map[string]bool {
	ids := map[string]bool{}
	for _, u := range ups {
		for _, r := range u.Requests() {
			if id := r.Header.Get("X-Request-Id"); id != "" {
				ids[id] = true
			}
		}
	}
	return ids
}

// ledger reads the metered request ids and how often each is stored.
type ledger func(t *testing.T) map[string]int

func sqliteLedger(dataDir string) ledger {
	return func(t *testing.T) map[string]int {
		t.Helper()
		db, err := sqlstore.OpenSQLite(filepath.Join(dataDir, "routebalance.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		return countIDs(t, func(q string) (rowScanner, error) { return db.Query(q) })
	}
}

func pgLedger(dsn string) ledger {
	return func(t *testing.T) map[string]int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		return countIDs(t, func(q string) (rowScanner, error) {
			rows, err := conn.Query(ctx, q)
			return pgRows{rows}, err
		})
	}
}

type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

type pgRows struct{ pgx.Rows }

func (r pgRows) Close() error { r.Rows.Close(); return nil }

var _ rowScanner = (*sql.Rows)(nil)

func countIDs(t *testing.T, query func(string) (rowScanner, error)) map[string]int {
	t.Helper()
	rows, err := query(`SELECT request_id, count(*) FROM billing_usage GROUP BY request_id`)
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// assertExactlyOnce checks the ledger holds every id that reached an
// instance once and nothing else; want is the least number of such
// requests the scenario must have produced (so the test cannot pass on
// an empty run).
func assertExactlyOnce(t *testing.T, seen map[string]bool, got map[string]int, want int) {
	t.Helper()
	if len(seen) < want {
		t.Errorf("only %d requests reached an instance, want ≥ %d (the scenario did not run)", len(seen), want)
	}
	var missing, twice, extra []string
	for id := range seen {
		switch n := got[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	for id := range got {
		if !seen[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(twice)
	sort.Strings(extra)
	if len(missing)+len(twice)+len(extra) > 0 {
		t.Errorf("ledger vs instances: %d reached, %d metered; not metered %v; metered twice %v; metered but never reached %v",
			len(seen), len(got), missing, twice, extra)
	}
}

// waitLedger polls until the ledger holds every id in seen (the meter
// writes within its flush interval) or testwait.Bound (30 s) passes.
func waitLedger(t *testing.T, read ledger, seen map[string]bool) map[string]int {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for {
		got := read(t)
		all := true
		for id := range seen {
			if got[id] == 0 {
				all = false
				break
			}
		}
		if all || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func statuses(outs []outcome) string {
	m := map[string]int{}
	for _, o := range outs {
		k := fmt.Sprint(o.status)
		if o.err != nil {
			k = "transport error"
		}
		m[k]++
	}
	return fmt.Sprint(m)
}

func TestChaosInstanceKilledMidStream(t *testing.T) {
	dir := t.TempDir()
	dying := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 40, DieAfter: 3, TokenDelay: time.Millisecond})
	healthy := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	base, stop := startServe(t, dir, "--allow-private-endpoints")
	key := chaosTenant(t, base, dying, healthy)
	outs := fire(context.Background(), base, key, 24, true, 0)
	outs = append(outs, fire(context.Background(), base, key, 8, false, 0)...)
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	seen := reached(dying, healthy)
	if len(dying.Requests()) == 0 {
		t.Fatalf("no request reached the dying instance (outcomes %s)", statuses(outs))
	}
	assertExactlyOnce(t, seen, sqliteLedger(dir)(t), 32)
}

func TestChaosUpstream5xx(t *testing.T) {
	dir := t.TempDir()
	broken := vllmtest.New(t, vllmtest.Config{Model: "m", Status: http.StatusServiceUnavailable})
	healthy := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	base, stop := startServe(t, dir, "--allow-private-endpoints")
	key := chaosTenant(t, base, broken, healthy)
	outs := append(fire(context.Background(), base, key, 16, false, 0), fire(context.Background(), base, key, 16, true, 0)...)
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if len(broken.Requests()) == 0 {
		t.Fatalf("no request reached the failing instance (outcomes %s)", statuses(outs))
	}
	assertExactlyOnce(t, reached(broken, healthy), sqliteLedger(dir)(t), 32)
}

func TestChaosUpstreamHangsPastDeadline(t *testing.T) {
	dir := t.TempDir()
	never := make(chan struct{}) // the upstream never sends its first token
	hung := vllmtest.New(t, vllmtest.Config{Model: "m", Hold: never})
	stalled := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 50, StallAfter: 2})
	base, stop := startServe(t, dir, "--allow-private-endpoints", "--request-timeout", "1s")
	key := chaosTenant(t, base, hung, stalled)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the client waits longer than the server
	defer cancel()
	outs := append(fire(ctx, base, key, 6, false, 0), fire(ctx, base, key, 6, true, 0)...)
	for _, o := range outs {
		if errors.Is(o.err, context.DeadlineExceeded) {
			t.Fatalf("a request outlived the 1 s server deadline by 30 s (outcomes %s)", statuses(outs))
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if len(hung.Requests())+len(stalled.Requests()) == 0 {
		t.Fatalf("nothing reached the hanging upstreams (outcomes %s)", statuses(outs))
	}
	assertExactlyOnce(t, reached(hung, stalled), sqliteLedger(dir)(t), 12)
}

func TestChaosClientDisconnectsMidStream(t *testing.T) {
	dir := t.TempDir()
	slow := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 200, TokenDelay: 5 * time.Millisecond})
	base, stop := startServe(t, dir, "--allow-private-endpoints")
	key := chaosTenant(t, base, slow)
	fire(context.Background(), base, key, 16, true, 3)
	// The instance notices each departure (the relay cancels upstream).
	deadline := time.Now().Add(testwait.Bound)
	for slow.Cancelled()+slow.Finished() < 16 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if slow.Cancelled() == 0 {
		t.Errorf("no upstream stream was cancelled after its client left (finished %d)", slow.Finished())
	}
	assertExactlyOnce(t, reached(slow), sqliteLedger(dir)(t), 16)
}

func TestChaosSIGTERMUnderLoad(t *testing.T) {
	dir := t.TempDir()
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 60, TokenDelay: 10 * time.Millisecond})
	// The drain gets a minute, not startServe's 5 s: 32 requests of 0.6 s
	// each took longer than 5 s on a loaded machine, and a request still
	// running at the deadline is cut (TestChaosSIGTERMPastGrace covers that).
	base, stop := startServe(t, dir, "--allow-private-endpoints", "--shutdown-timeout", "1m")
	key := chaosTenant(t, base, up)
	const streams, calls = 24, 8
	done := make(chan []outcome, 2)
	go func() { done <- fire(context.Background(), base, key, streams, true, 0) }()
	go func() { done <- fire(context.Background(), base, key, calls, false, 0) }()
	deadline := time.Now().Add(testwait.Bound)
	for len(up.Requests()) < streams+calls && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if up.Finished() == int64(streams+calls) {
		t.Fatal("every request finished before SIGTERM: nothing was in flight")
	}
	if err := stop(); err != nil { // SIGTERM: drain, then meter flush
		t.Fatalf("serve: %v", err)
	}
	outs := append(<-done, <-done...)
	for _, o := range outs {
		if o.status == 200 && strings.Contains(o.body, "data: ") && !strings.Contains(o.body, "data: [DONE]") {
			t.Errorf("a stream in flight at SIGTERM was cut: %q", o.body[max(0, len(o.body)-200):])
		}
	}
	assertExactlyOnce(t, reached(up), sqliteLedger(dir)(t), streams+calls)
}

// TestChaosSIGTERMPastGrace stops the service while streams that run far
// longer than the shutdown grace are in flight: at the end of the grace
// they are cut, and each is still metered exactly once (what it served),
// in the ledger when serve returns, not left for a later start.
func TestChaosSIGTERMPastGrace(t *testing.T) {
	dir := t.TempDir()
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 2000, TokenDelay: 10 * time.Millisecond})
	base, stop := startServe(t, dir, "--allow-private-endpoints", "--shutdown-timeout", "300ms")
	key := chaosTenant(t, base, up)
	const streams = 6
	done := make(chan []outcome, 1)
	go func() { done <- fire(context.Background(), base, key, streams, true, 0) }()
	testwait.Until(t, "every stream reached the instance", func() bool { return len(up.Requests()) >= streams })
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	outs := <-done
	for _, o := range outs {
		if o.status == 200 && strings.Contains(o.body, "data: [DONE]") {
			t.Errorf("a 20 s stream finished within a 0.3 s grace: the scenario did not cut it")
		}
	}
	if spilled := spillFiles(t, dir); len(spilled) > 0 {
		t.Errorf("usage spilled for a later start instead of metered before serve returned: %v", spilled)
	}
	assertExactlyOnce(t, reached(up), sqliteLedger(dir)(t), streams)
}

// chaosPostgres creates a fresh schema on the test server (DATABASE_URL
// or the local default), dropped at the end, and returns the direct DSN
// and the DSN through a cuttable TCP proxy, both with search_path set.
func chaosPostgres(t *testing.T) (direct, proxied string, p *tcpproxy.Proxy) {
	t.Helper()
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no Postgres at %s (%v); CI runs this", dsn, err)
		}
		t.Fatal(err)
	}
	schema := fmt.Sprintf("chaos_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	direct = u.String()
	p = tcpproxy.New(t, u.Host)
	u.Host = p.Addr()
	return direct, u.String(), p
}

// spillFiles lists the meter's spill files in the data dir.
func spillFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dataDir, "meter", "meter-*.jsonl"))
	return m
}

func TestChaosPostgresOutage(t *testing.T) {
	direct, proxied, p := chaosPostgres(t)
	dir := t.TempDir()
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	base, stop := startServe(t, dir, "--allow-private-endpoints", "--database-url", proxied)
	key := chaosTenant(t, base, up)
	before := fire(context.Background(), base, key, 8, false, 0)
	waitLedger(t, pgLedger(direct), reached(up))
	recacheKey(t, base, key, direct, up)
	settled := reached(up)
	p.Down()
	during := append(fire(context.Background(), base, key, 16, false, 0), fire(context.Background(), base, key, 8, true, 0)...)
	time.Sleep(300 * time.Millisecond) // the meter's writers hit the dead connection
	// The outage was real: what was served during it is not in the ledger yet.
	mid := pgLedger(direct)(t)
	cutOff := 0
	for id := range reached(up) {
		if !settled[id] && mid[id] == 0 {
			cutOff++
		}
	}
	if cutOff == 0 {
		t.Fatalf("every request served during the outage was already in the ledger: the proxy did not cut the meter off (outcomes %s)", statuses(during))
	}
	p.Up()
	after := fire(context.Background(), base, key, 8, false, 0)
	seen := reached(up)
	got := waitLedger(t, pgLedger(direct), seen)
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Logf("outcomes before %s, during %s, after %s", statuses(before), statuses(during), statuses(after))
	assertExactlyOnce(t, seen, got, 16)
	assertExactlyOnce(t, seen, pgLedger(direct)(t), 16)
}

// recacheKey sends one more request (and waits for its ledger row) right
// before a Postgres outage. The setup's changes (sign-up, cluster, instance,
// key) reach serve as Postgres notifications, and each drops the tenant's
// cached key resolution; on a loaded machine the last one can be handled
// after the first requests cached the key, and then every request during
// the outage needs the database (all 500: nothing reaches an instance,
// nothing is spilled). By now those notifications have long been handled,
// so this resolution stays cached through the outage.
func recacheKey(t *testing.T, base, key, direct string, up *vllmtest.Server) {
	t.Helper()
	if o := fire(context.Background(), base, key, 1, false, 0); o[0].status != http.StatusOK {
		t.Fatalf("request before the outage: %d %v %s", o[0].status, o[0].err, o[0].body)
	}
	waitLedger(t, pgLedger(direct), reached(up))
}

// TestChaosPostgresOutageWithSIGTERM stops serve while Postgres is cut
// off: the meter spills what it cannot write; the next start (same data
// dir, database back) replays the spill file. Replaying the same file a
// second time (a crash after the write, before the delete) stores nothing
// twice.
func TestChaosPostgresOutageWithSIGTERM(t *testing.T) {
	direct, proxied, p := chaosPostgres(t)
	dir := t.TempDir()
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 30, TokenDelay: 5 * time.Millisecond})
	base, stop := startServe(t, dir, "--allow-private-endpoints", "--database-url", proxied, "--shutdown-timeout", "3s")
	key := chaosTenant(t, base, up)
	fire(context.Background(), base, key, 4, false, 0)
	waitLedger(t, pgLedger(direct), reached(up)) // settled before the outage
	recacheKey(t, base, key, direct, up)
	p.Down()
	done := make(chan []outcome, 1)
	go func() {
		done <- append(fire(context.Background(), base, key, 12, true, 0), fire(context.Background(), base, key, 12, false, 0)...)
	}()
	deadline := time.Now().Add(testwait.Bound)
	for len(up.Requests()) < 5+12 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := stop(); err != nil { // SIGTERM during the outage
		t.Fatalf("serve: %v", err)
	}
	outs := <-done
	spilled := spillFiles(t, dir)
	if len(spilled) == 0 {
		t.Fatalf("serve stopped with the database down and left no spill file (outcomes %s)", statuses(outs))
	}
	var saved [][]byte
	for _, f := range spilled {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, b)
	}
	seen := reached(up)
	p.Up()
	_, stop = startServe(t, dir, "--allow-private-endpoints", "--database-url", proxied)
	got := waitLedger(t, pgLedger(direct), seen)
	if err := stop(); err != nil {
		t.Fatalf("second serve: %v", err)
	}
	if left := spillFiles(t, dir); len(left) != 0 {
		t.Errorf("spill files left after replay: %v", left)
	}
	assertExactlyOnce(t, seen, got, 16)

	// Replay the same spill file again: idempotent by request id.
	for i, b := range saved {
		if err := os.WriteFile(filepath.Join(dir, "meter", fmt.Sprintf("meter-spill-again-%d.jsonl", i)), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "meter", fmt.Sprintf("meter-spill-again-%d.jsonl", i)), filepath.Join(dir, "meter", "meter-spill.jsonl")); err != nil {
			t.Fatal(err)
		}
		_, stop = startServe(t, dir, "--allow-private-endpoints", "--database-url", proxied)
		deadline := time.Now().Add(testwait.Bound)
		for len(spillFiles(t, dir)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatalf("third serve: %v", err)
		}
	}
	assertExactlyOnce(t, seen, pgLedger(direct)(t), 16)
}
