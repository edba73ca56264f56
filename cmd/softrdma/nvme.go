package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/softrdma/softrdma/internal/nvmecli"
)

// runNvmet and runNvme run the NVMe-oF tools until they finish or the
// process is interrupted (the target then disconnects its hosts).
func runNvmet(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return nvmecli.RunTarget(ctx, args, os.Stdout, os.Stderr)
}

func runNvme(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return nvmecli.RunHost(ctx, args, os.Stdout, os.Stderr)
}
