package main

import (
	"context"
	"errors"
	"io"
)

// runSimulate is not built yet; its issue owns this file.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("simulate: not built yet")
}
