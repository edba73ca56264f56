// Package rdmacm is softrdma's librdmacm example tools over package cm and
// rdmanet: rping, ucmatose (cmatose), udaddy, rstream and riostream, with
// their flags, exchanges and output, so either end can be the librdmacm
// tool.
package rdmacm

import (
	"context"
	"fmt"
	"io"

	"github.com/softrdma/softrdma/internal/tools/device"
)

// runEnv is what one run of a tool runs with besides its flags.
type runEnv struct {
	ctx            context.Context
	stdout, stderr io.Writer
	opener         *device.Opener
}

// Commands are the tools Run runs, by the name Run takes as args[0].
func Commands() []string { return []string{"rping", "ucmatose", "udaddy", "rstream", "riostream"} }

// Run runs the tool args[0] names (one of Commands) with the command line
// args[1:]. It stops waiting for a peer when ctx ends. -h prints the
// usage and returns flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("rdmacm.Run: args[0] must name the tool (one of %v)", Commands())
	}
	opener, err := device.NewOpener(ctx, stderr)
	if err != nil {
		return err
	}
	defer opener.Close()
	e := &runEnv{ctx: ctx, stdout: stdout, stderr: stderr, opener: opener}
	switch args[0] {
	case "rping":
		return runRping(e, args[1:])
	case "ucmatose", "cmatose":
		return runUcmatose(e, args[1:])
	case "udaddy":
		return runUdaddy(e, args[1:])
	case "rstream":
		return runRstream(e, args[1:])
	case "riostream":
		return runRiostream(e, args[1:])
	}
	return fmt.Errorf("rdmacm.Run: unknown tool %q (want one of %v)", args[0], Commands())
}
