package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/softrdma/softrdma/cm"
)

// exitOnSignal makes SIGINT and SIGTERM end the process the way a tool
// that finished ends it: its connections send their DREQ (the kernel does
// that for rdma_cm's users; here the process must), the trace and the
// output files are closed, and the exit status is the shell's 128 + the
// signal's number.
func exitOnSignal(name string, cleanup func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		n := cm.DisconnectAll()
		cleanup()
		if n > 0 {
			fmt.Fprintf(os.Stderr, "%s: %v: disconnected %d connection(s)\n", name, s, n)
		}
		code := 128 + 2
		if s == syscall.SIGTERM {
			code = 128 + 15
		}
		os.Exit(code)
	}()
}
