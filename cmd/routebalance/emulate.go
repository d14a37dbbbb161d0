package main

import (
	"context"
	"errors"
	"io"
)

// runEmulate is not built yet; its issue owns this file.
func runEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("emulate: not built yet")
}
