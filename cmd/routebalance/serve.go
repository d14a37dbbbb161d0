package main

import (
	"context"
	"errors"
	"io"
)

// runServe is not built yet; its issue owns this file.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("serve: not built yet")
}
