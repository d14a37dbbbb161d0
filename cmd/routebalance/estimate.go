package main

import (
	"context"
	"errors"
	"io"
)

// runEstimate is not built yet; its issue owns this file.
func runEstimate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("estimate: not built yet")
}
