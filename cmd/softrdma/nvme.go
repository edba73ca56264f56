package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/softrdma/softrdma/internal/nvmecli"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/verbs"
)

// runNvmet and runNvme run the NVMe-oF tools (internal/nvmecli; args[0]
// is the command's name) until they finish or the
// process is interrupted (the target then disconnects its hosts).
func runNvmet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runNvmeTool(ctx, args, stdout, stderr, nvmecli.RunTarget)
}

func runNvme(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runNvmeTool(ctx, args, stdout, stderr, nvmecli.RunHost)
}

func runNvmeTool(ctx context.Context, args []string, stdout, stderr io.Writer,
	run func(context.Context, []string, io.Writer, io.Writer, nvmecli.Opener) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	open, done, err := nvmeOpener(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	return run(ctx, args[1:], stdout, stderr, open)
}

// nvmeOpener opens the NVMe tools' devices as the other tools do, with
// the SOFTRDMA_* switches: by name (-d shm0), else by address.
func nvmeOpener(ctx context.Context, stderr io.Writer) (nvmecli.Opener, func(), error) {
	op, err := device.NewOpener(ctx, stderr)
	if err != nil {
		return nil, nil, err
	}
	open := func(name, local, remote string) (verbs.Context, error) {
		if name != "" {
			if !device.IsShmName(name) {
				return nil, fmt.Errorf("device %q: name a shared-memory device (shm0) or give the address (-w/--host-traddr) of a RoCEv2 one", name)
			}
			return op.Open(name)
		}
		return op.OpenCM(local, remote)
	}
	return open, op.Close, nil
}
