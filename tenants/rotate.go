package tenants

import (
	"context"
	"fmt"
)

// SealedKey is one instance's sealed upstream credential, as key rotation
// sees it.
type SealedKey struct {
	TenantID   string
	ClusterID  string
	InstanceID string
	Sealed     []byte
}

// SealedKeyStore lists and rewrites sealed upstream keys across tenants.
// Only key rotation (ResealInstanceKeys) uses it.
type SealedKeyStore interface {
	// SealedInstanceKeys returns every instance that has an upstream key.
	SealedInstanceKeys(ctx context.Context) ([]SealedKey, error)
	// ReplaceSealedInstanceKey stores resealed if the row still holds
	// k.Sealed (compare-and-swap) and reports whether it did.
	ReplaceSealedInstanceKey(ctx context.Context, k SealedKey, resealed []byte) (bool, error)
}

// ResealReport counts what ResealInstanceKeys did.
type ResealReport struct {
	Checked  int // instances with an upstream key
	Resealed int // moved from a previous key onto the current one
	Unopened int // no configured key opens them (left untouched)
	Raced    int // changed by someone else meanwhile (already current)
}

// ResealInstanceKeys moves every upstream credential sealed with one of the
// sealer's previous keys onto its current key, so the previous key can then
// be dropped from the configuration. It is idempotent and safe to run while
// the service serves: rows edited meanwhile are left alone.
func ResealInstanceKeys(ctx context.Context, store SealedKeyStore, sealer *Sealer) (ResealReport, error) {
	var r ResealReport
	keys, err := store.SealedInstanceKeys(ctx)
	if err != nil {
		return r, fmt.Errorf("list sealed keys: %w", err)
	}
	for _, k := range keys {
		r.Checked++
		out, changed, err := sealer.Reseal(k.Sealed, k.InstanceID)
		if err != nil {
			r.Unopened++
			continue
		}
		if !changed {
			continue
		}
		ok, err := store.ReplaceSealedInstanceKey(ctx, k, out)
		if err != nil {
			return r, fmt.Errorf("reseal instance %s: %w", k.InstanceID, err)
		}
		if ok {
			r.Resealed++
		} else {
			r.Raced++
		}
	}
	return r, nil
}
