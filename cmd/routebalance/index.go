package main

import (
	"context"
	"errors"
	"io"
)

// runIndex is not built yet; its issue owns this file.
func runIndex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("index: not built yet")
}
