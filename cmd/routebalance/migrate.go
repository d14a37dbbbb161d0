package main

import (
	"context"
	"errors"
	"io"
)

// runMigrate is not built yet; its issue owns this file.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("migrate: not built yet")
}
