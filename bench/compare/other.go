//go:build !linux

// Command compare is Linux-only: it reads /proc/net/tcp, uses process groups
// and runs Debian packages.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench/compare runs on Linux only")
	os.Exit(1)
}
