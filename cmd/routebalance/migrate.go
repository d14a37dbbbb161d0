package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/routebalance/routebalance/migrations"
)

// runMigrate applies every pending migration to the configured database
// (Postgres with --database-url, else SQLite in --data-dir) and prints the
// applied and present versions.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dataDir, url string
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	commonFlags(fs, &dataDir, &url)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	db, err := openDatabase(ctx, dataDir, url)
	if err != nil {
		return err
	}
	defer db.close()
	applied, err := db.migrate(ctx)
	if err != nil {
		return err
	}
	all, err := migrations.List(db.engine)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "engine: %s\n", db.engine)
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "applied now: none (up to date)")
	} else {
		fmt.Fprintf(stdout, "applied now: %v\n", applied)
	}
	for _, m := range all {
		fmt.Fprintf(stdout, "  %s\n", m.Name)
	}
	return nil
}
