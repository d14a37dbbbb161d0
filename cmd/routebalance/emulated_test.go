package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// emulatedServe is the real serve (SQLite in a temporary data dir) in
// front of an emulated cluster, with one tenant signed up, one cluster and
// one API key; the tests that drive serve over the emulator share it.
type emulatedServe struct {
	emu     *vllmemu.Cluster
	dir     string
	base    string // serve's URL
	tok     string // the tenant's access token
	cluster string // the cluster's id
	key     string // the API key's secret
	client  openai.Client
	stop    func() error
}

// startEmulated parses clusterFile, starts the emulated cluster (cfg.File
// is set from it) and serve in front of it, signs up a tenant and creates
// its cluster and key; the instances are registered by the caller
// (register). serveArgs are added to serve's flags. Everything stops with
// the test.
func startEmulated(t *testing.T, clusterFile string, cfg vllmemu.Config, serveArgs ...string) *emulatedServe {
	t.Helper()
	f, err := engine.ParseCluster([]byte(clusterFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg.File = f
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emu, err := vllmemu.StartCluster(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	s := &emulatedServe{emu: emu, dir: t.TempDir()}
	s.base, s.stop = startServe(t, s.dir, append([]string{"--allow-private-endpoints"}, serveArgs...)...)
	s.tok = postJSON(t, s.base+"/api/v1/signup", "", `{"email":"emu@example.com","password":"correct-horse-42","name":"Emu"}`)["access_token"].(string)
	s.cluster = postJSON(t, s.base+"/api/v1/clusters", s.tok, `{"name":"c"}`)["id"].(string)
	s.key = postJSON(t, s.base+"/api/v1/keys", s.tok, `{"name":"k"}`)["key"].(string)
	s.client = openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey(s.key), option.WithMaxRetries(0))
	return s
}

// register registers the emulated instance in the cluster with the
// instance fields of fields (a JSON object's members without braces,
// added after base_url and model) and returns what serve answered.
func (s *emulatedServe) register(t *testing.T, in *vllmemu.Instance, fields string) map[string]any {
	t.Helper()
	return postJSON(t, s.base+"/api/v1/clusters/"+s.cluster+"/instances", s.tok,
		`{"base_url":"`+in.URL+`","model":"`+in.Spec().Tier.Model+`",`+fields+`}`)
}

// ledger stops serve (flushing the meter) and opens its SQLite database.
func (s *emulatedServe) ledger(t *testing.T) *sql.DB {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	db, err := sqlstore.OpenSQLite(filepath.Join(s.dir, "routebalance.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
