//go:build !linux

// Command nvme measures softrdma's NVMe-oF target and host; it needs
// Linux (O_DIRECT for the floor, /proc for the target's CPU).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench/nvme runs on Linux")
	os.Exit(1)
}
