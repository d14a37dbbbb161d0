package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/tenants"
)

// TestResealCommand rotates the encryption key of a SQLite data dir with
// the command: the stored credential opens with the new key alone after it.
func TestResealCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldKey, newKey := bytes.Repeat([]byte{3}, 32), bytes.Repeat([]byte{4}, 32)

	db, err := openDatabase(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	store := db.tenantStore()
	now := time.Now().UTC()
	tn := tenants.Tenant{ID: "t1", Name: "T", CreatedAt: now, ConfigVersion: 1}
	u := tenants.User{ID: "u1", TenantID: "t1", Email: "a@example.com", PasswordHash: "x", CreatedAt: now}
	if err := store.CreateAccount(ctx, tn, u, tenants.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateCluster(ctx, tenants.Cluster{ID: "c1", TenantID: "t1", Name: "c", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	old, _ := tenants.NewSealer(oldKey)
	sealed, _ := old.Seal("sk-upstream", "i1")
	in := tenants.Instance{ID: "i1", ClusterID: "c1", BaseURL: "http://10.0.0.1:8000", Model: "m", GPU: "g", TensorParallel: 1, QualityPrior: 0.5, SealedAPIKey: sealed, HasAPIKey: true, CreatedAt: now, UpdatedAt: now}
	if err := store.CreateInstance(ctx, "t1", in); err != nil {
		t.Fatal(err)
	}
	store.Close()
	db.close()

	var out, errOut bytes.Buffer
	args := []string{"--data-dir", dir, "--database-url", "", "--encryption-key", hex.EncodeToString(newKey), "--encryption-key-previous", hex.EncodeToString(oldKey)}
	if err := runReseal(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("reseal: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "resealed with the current key: 1") {
		t.Errorf("reseal output:\n%s", out.String())
	}

	db, err = openDatabase(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.close()
	store = db.tenantStore()
	defer store.Close()
	got, err := store.Instance(ctx, "t1", "c1", "i1")
	if err != nil {
		t.Fatal(err)
	}
	newOnly, _ := tenants.NewSealer(newKey)
	if pt, err := newOnly.Open(got.SealedAPIKey, "i1"); err != nil || pt != "sk-upstream" {
		t.Errorf("after reseal, new key alone opens %q, %v; want sk-upstream", pt, err)
	}
}
