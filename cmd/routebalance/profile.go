package main

import (
	"context"
	"errors"
	"io"
)

// runProfile is not built yet; its issue owns this file.
func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("profile: not built yet")
}
