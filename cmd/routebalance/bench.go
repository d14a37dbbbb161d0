package main

import (
	"context"
	"errors"
	"io"
)

// runBench is not built yet; its issue owns this file.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("bench: not built yet")
}
