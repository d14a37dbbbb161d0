package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/routebalance/routebalance/internal/redistest"
	"github.com/routebalance/routebalance/internal/testenv"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

// postgresURL returns DATABASE_URL (or dbtest.DefaultDatabaseURL) with a
// fresh schema as search_path (dropped at cleanup), for serve processes
// that share one database. Without a server it skips, or fails under CI,
// like migrations/dbtest.
func postgresURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		base = dbtest.DefaultDatabaseURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "rbtest_" + hex.EncodeToString(b[:])
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		testenv.Need(t, "postgres", "no server answers (set DATABASE_URL or start one at 127.0.0.1:5432): "+testenv.Cause(err))
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// replicaSet starts n serve processes on one Postgres schema and one Redis
// prefix, with the same secrets (as a Deployment's pods share a Secret).
func replicaSet(t *testing.T, n int) (bases []string, redisPrefix string) {
	t.Helper()
	db := postgresURL(t)
	_, prefix := redistest.Client(t) // skips (or fails under CI) without Redis; deletes the prefix after
	secret := strings.Repeat("s", 40)
	encKey := strings.Repeat("ab", 32)
	for range n {
		// --redis-timeout 5s: past the 250 ms default a limit or budget
		// check fails open (each replica on its own view), which a loaded
		// machine would turn into an rpm or budget "overrun" here.
		base, stop := startServe(t, t.TempDir(), "--database-url", db, "--redis-url", redistest.URL(), "--redis-prefix", prefix,
			"--jwt-secret", secret, "--encryption-key", encKey, "--allow-private-endpoints", "--redis-timeout", "5s")
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
		bases = append(bases, base)
	}
	return bases, prefix
}

// send posts one chat completion with key and returns the status.
func send(t *testing.T, base, key string) int { return sendBody(t, base, key, false) }

// sendBody posts one chat completion, streamed or not, reads the whole
// answer and returns the status.
func sendBody(t *testing.T, base, key string, stream bool) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"auto","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("request: %v", err)
		return 0
	}
	io.Copy(io.Discard, res.Body) //nolint:errcheck
	res.Body.Close()
	return res.StatusCode
}

// tenant signs up on base, registers up as its one instance with the given
// output price, and returns the session token and an API key.
func tenant(t *testing.T, base, email, upURL string, priceOut float64) (token, key, keyID string) {
	t.Helper()
	token = postJSON(t, base+"/api/v1/signup", "", `{"email":"`+email+`","password":"correct-horse-42","name":"T"}`)["access_token"].(string)
	cid := postJSON(t, base+"/api/v1/clusters", token, `{"name":"c"}`)["id"].(string)
	postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", token, fmt.Sprintf(`{"base_url":%q,"model":"m","gpu":"l4","price_out_per_mtok":%g,"max_concurrency":32}`, upURL, priceOut))
	k := postJSON(t, base+"/api/v1/keys", token, `{"name":"k"}`)
	return token, k["key"].(string), k["id"].(string)
}

func putJSON(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return res.StatusCode
}

// TestReplicasShareLimitsBudgetsAndRevocation runs three `serve` processes
// on one Postgres and one Redis: a tenant's rpm = 20 holds across them, a
// monthly budget is overrun by at most the documented bound, and a key
// revoked on one replica is refused on another.
func TestReplicasShareLimitsBudgetsAndRevocation(t *testing.T) {
	// Streamed answers of 8 tokens 5 ms apart are in flight ~40 ms, so
	// requests overlap across replicas and the budget bound's K is exercised.
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 8, TokenDelay: 5 * time.Millisecond})
	bases, prefix := replicaSet(t, 3)

	t.Run("rpm across replicas", func(t *testing.T) {
		tok, key, _ := tenant(t, bases[0], "rpm@example.com", up.URL, 1)
		putJSON(t, "PUT", bases[0]+"/api/v1/settings", tok, `{"preset":"balanced","limits":{"rpm":20}}`)
		start := time.Now()
		passed, limited := 0, 0
		for i := range 60 {
			switch st := send(t, bases[i%2], key); st { // A and B
			case 200:
				passed++
			case 429:
				limited++
			default:
				t.Fatalf("request %d: status %d", i, st)
			}
		}
		// The bucket starts full (20) and refills 20/min: the bound is
		// 20 + 20·elapsed/60 s.
		elapsed := time.Since(start)
		bound := 20 + int(20*elapsed.Seconds()/60)
		if n, err := redisKeys(t, prefix+":lim:*"); err != nil || n == 0 {
			t.Fatalf("no rate-limit keys under %s:lim in Redis (%d, %v): the replicas did not use it", prefix, n, err)
		}
		t.Logf("rpm=20 over two replicas: %d of 60 passed, %d got 429, in %v (bound %d)", passed, limited, elapsed.Round(time.Millisecond), bound)
		if passed < 20 || passed > bound {
			t.Fatalf("%d of 60 passed across two replicas with rpm 20, want 20..%d", passed, bound)
		}
	})

	t.Run("budget across three replicas", func(t *testing.T) {
		// $0.01 per output token × 8 tokens = $0.08 a request; $0.50 budget.
		const perReq, budget = 0.08, 0.5
		tok, key, _ := tenant(t, bases[0], "budget@example.com", up.URL, 10000)
		putJSON(t, "PUT", bases[0]+"/api/v1/settings", tok, fmt.Sprintf(`{"preset":"balanced","slo":{"monthly_budget_usd":%g}}`, budget))
		const clients = 6
		var (
			mu     sync.Mutex
			served int
			wg     sync.WaitGroup
		)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					st := sendBody(t, bases[(c+i)%3], key, true)
					if st == 402 {
						return
					}
					if st != 200 {
						t.Errorf("client %d: status %d", c, st)
						return
					}
					mu.Lock()
					served++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// The ledger's total (written asynchronously by each replica's meter).
		var billed float64
		var requests int
		testwait.Until(t, fmt.Sprintf("the ledger to hold the %d requests served", served), func() bool {
			u := getJSON(t, bases[2]+"/api/v1/usage", tok)
			total := u["total"].(map[string]any)
			billed, requests = total["billed_usd"].(float64), int(total["requests"].(float64))
			return requests >= served
		})
		if requests != served {
			t.Fatalf("ledger holds %d requests, clients were served %d", requests, served)
		}
		// Bound (billing/redisspend/README.md): overrun ≤ per-request cost ×
		// (requests in flight at the crossing + those admitted within one
		// push delay) ≤ perReq × 2 × clients for sequential clients.
		over := billed - budget
		t.Logf("budget $%.2f, %d clients over 3 replicas: %d served, billed $%.2f (%.0f%% of the budget, overrun %.1f requests; bound %d)", budget, clients, served, billed, 100*billed/budget, over/perReq, 2*clients)
		if billed < budget {
			t.Fatalf("billed $%v stopped below the $%v budget", billed, budget)
		}
		if over > perReq*2*clients+1e-9 {
			t.Fatalf("billed $%.2f: overrun %.2f above the bound %.2f", billed, over, perReq*2*clients)
		}
	})

	t.Run("key revoked on A is refused on B", func(t *testing.T) {
		tok, key, keyID := tenant(t, bases[0], "revoke@example.com", up.URL, 1)
		if st := send(t, bases[1], key); st != 200 { // B resolves and caches the key
			t.Fatalf("before revocation B answered %d", st)
		}
		putJSON(t, "DELETE", bases[0]+"/api/v1/keys/"+keyID, tok, "")
		revoked := time.Now()
		st := 0
		for deadline := revoked.Add(testwait.Bound); ; {
			if st = send(t, bases[1], key); st == 401 {
				t.Logf("B refused the revoked key %v after the revocation on A", time.Since(revoked).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B still answers %d to a key revoked on A %v ago", st, testwait.Bound)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func getJSON(t *testing.T, url, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil || res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, res.StatusCode, err)
	}
	return m
}

// redisKeys counts the keys matching pattern in the test Redis.
func redisKeys(t *testing.T, pattern string) (int, error) {
	c := redistest.NewClient(t)
	keys, err := c.Keys(context.Background(), pattern).Result()
	return len(keys), err
}
