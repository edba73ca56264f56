package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/softrdma/softrdma/internal/nvmecli"
)

// runNvmet and runNvme run the NVMe-oF tools (internal/nvmecli; args[0]
// is the command's name) until they finish or the
// process is interrupted (the target then disconnects its hosts).
func runNvmet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return nvmecli.RunTarget(ctx, args[1:], stdout, stderr)
}

func runNvme(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return nvmecli.RunHost(ctx, args[1:], stdout, stderr)
}
