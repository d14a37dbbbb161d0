package sqlstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/tenants"
)

// TestResealInstanceKeys rotates the encryption key over real stores: every
// credential sealed with the old key ends up under the new one, readable
// without the old key, and a second run changes nothing.
func TestResealInstanceKeys(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	oldSealer, _ := tenants.NewSealer(oldKey)
	rotating, _ := tenants.NewSealer(newKey, oldKey)
	newOnly, _ := tenants.NewSealer(newKey)
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		ctx := context.Background()
		s := open(t, e)
		a := account(t, s, 1)
		c := tenants.Cluster{ID: "cl-1", TenantID: a.ID, Name: "c", CreatedAt: t0, UpdatedAt: t0}
		if err := s.CreateCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
		secrets := map[string]string{"i-1": "sk-one", "i-2": "sk-two", "i-3": ""}
		for id, secret := range secrets {
			in := tenants.Instance{ID: id, ClusterID: c.ID, BaseURL: "http://10.0.0.1:8000", Model: "m", GPU: "g", TensorParallel: 1, QualityPrior: 0.5, CreatedAt: t0, UpdatedAt: t0}
			if secret != "" {
				sealed, err := oldSealer.Seal(secret, id)
				if err != nil {
					t.Fatal(err)
				}
				in.SealedAPIKey, in.HasAPIKey = sealed, true
			}
			if err := s.CreateInstance(ctx, a.ID, in); err != nil {
				t.Fatal(err)
			}
		}

		r, err := tenants.ResealInstanceKeys(ctx, s, rotating)
		if err != nil {
			t.Fatal(err)
		}
		if want := (tenants.ResealReport{Checked: 2, Resealed: 2}); r != want {
			t.Errorf("first run = %+v, want %+v", r, want)
		}
		for id, secret := range secrets {
			in, err := s.Instance(ctx, a.ID, c.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if secret == "" {
				if len(in.SealedAPIKey) != 0 {
					t.Errorf("%s: a key appeared where there was none", id)
				}
				continue
			}
			got, err := newOnly.Open(in.SealedAPIKey, id)
			if err != nil || got != secret {
				t.Errorf("%s: opened with the new key alone = %q, %v; want %q", id, got, err, secret)
			}
		}
		r, err = tenants.ResealInstanceKeys(ctx, s, rotating)
		if err != nil {
			t.Fatal(err)
		}
		if want := (tenants.ResealReport{Checked: 2}); r != want {
			t.Errorf("second run = %+v, want %+v (idempotent)", r, want)
		}

		// A stale view never overwrites a row edited meanwhile.
		stale := tenants.SealedKey{TenantID: a.ID, ClusterID: c.ID, InstanceID: "i-1", Sealed: []byte("not what the row holds")}
		if ok, err := s.ReplaceSealedInstanceKey(ctx, stale, []byte("x")); err != nil || ok {
			t.Errorf("compare-and-swap on a stale value = %v, %v; want false, nil", ok, err)
		}
	})
}
