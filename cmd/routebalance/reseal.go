package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/routebalance/routebalance/tenants"
)

// previousKeyFlags registers the rotation flags shared by serve and reseal.
func previousKeyFlags(fs *flag.FlagSet, jwtPrevious, encPrevious *string) {
	fs.StringVar(jwtPrevious, "jwt-secret-previous", env("JWT_SECRET_PREVIOUS", ""), "comma-separated earlier JWT secrets that still verify sessions (never sign) during a rotation (env ROUTEBALANCE_JWT_SECRET_PREVIOUS)")
	fs.StringVar(encPrevious, "encryption-key-previous", env("ENCRYPTION_KEY_PREVIOUS", ""), "comma-separated earlier encryption keys that still open upstream credentials during a rotation; routebalance reseal moves them to the current key (env ROUTEBALANCE_ENCRYPTION_KEY_PREVIOUS)")
}

// decodeSecretList decodes a comma-separated list of secrets; "" is none.
func decodeSecretList(v string) ([][]byte, error) {
	var out [][]byte
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		b, err := decodeSecret(part)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// runReseal re-encrypts every instance's upstream credential with the
// current encryption key, opening it with the current or a previous key.
func runReseal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dataDir, url, encKey, jwtPrevious, encPrevious string
	fs := flag.NewFlagSet("reseal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	commonFlags(fs, &dataDir, &url)
	fs.StringVar(&encKey, "encryption-key", env("ENCRYPTION_KEY", ""), "the NEW AES-256 key (base64 or hex); default the data dir's encryption.key (env ROUTEBALANCE_ENCRYPTION_KEY)")
	previousKeyFlags(fs, &jwtPrevious, &encPrevious)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if encPrevious == "" {
		fmt.Fprintln(stderr, "reseal: --encryption-key-previous is required (the key the credentials are sealed with now)")
		return errUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cur, err := loadSecret(encKey, dataDir, "encryption.key", 32, log)
	if err != nil {
		return fmt.Errorf("encryption key: %w", err)
	}
	prev, err := decodeSecretList(encPrevious)
	if err != nil {
		return fmt.Errorf("previous encryption keys: %w", err)
	}
	sealer, err := tenants.NewSealer(cur, prev...)
	if err != nil {
		return err
	}
	db, err := openDatabase(ctx, dataDir, url)
	if err != nil {
		return err
	}
	defer db.close()
	if _, err := db.migrate(ctx); err != nil {
		return err
	}
	store := db.tenantStore()
	defer store.Close()
	r, err := tenants.ResealInstanceKeys(ctx, store, sealer)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "instances with upstream keys: %d\nresealed with the current key: %d\nchanged meanwhile (left alone): %d\nopened by no configured key: %d\n", r.Checked, r.Resealed, r.Raced, r.Unopened)
	if r.Unopened > 0 {
		return fmt.Errorf("%d upstream keys open with none of the configured keys; keep the key that sealed them", r.Unopened)
	}
	return nil
}
