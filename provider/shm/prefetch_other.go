//go:build !amd64

package shm

import "unsafe"

// prefetchw is a no-op where the project has no prefetch instruction.
func prefetchw(unsafe.Pointer) {}
