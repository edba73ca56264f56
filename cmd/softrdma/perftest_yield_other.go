//go:build !linux

package main

import "runtime"

// ptYield lets other goroutines run in a busy-polling loop.
func ptYield() { runtime.Gosched() }
