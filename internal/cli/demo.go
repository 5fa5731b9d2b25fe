package cli

import (
	"context"
	"fmt"
	"io"
)

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("demo: waiting for the simulator")
}

func simulateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("simulate: waiting for the simulator")
}
