//go:build cgo && clib

package main

/*
#include <errno.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"

	"github.com/softrdma/softrdma/verbs"
)

// logErrors (SOFTRDMA_LOG=1, read with the tools' other variables when
// the device list is built) prints the error behind every failing call on
// stderr: rdma-core's functions return only an errno, softrdma's errors
// say what was wrong and what to do.
var logErrors bool

// errnoOf maps a verbs error to the errno rdma-core's providers return
// for the same failure.
func errnoOf(op string, err error) C.int {
	if err == nil {
		return 0
	}
	if logErrors {
		fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", op, err)
	}
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		return C.int(en)
	case errors.Is(err, verbs.ErrInvalidArgument), errors.Is(err, verbs.ErrInvalidState):
		return C.EINVAL
	case errors.Is(err, verbs.ErrNotSupported):
		return C.EOPNOTSUPP
	case errors.Is(err, verbs.ErrQueueFull):
		return C.ENOMEM
	case errors.Is(err, verbs.ErrInUse):
		return C.EBUSY
	case errors.Is(err, verbs.ErrDestroyed):
		return C.ENODEV
	case errors.Is(err, verbs.ErrNotFound):
		return C.ENODEV
	case errors.Is(err, verbs.ErrUnreachable):
		return C.EHOSTUNREACH
	}
	return C.EIO
}

// guard is deferred by every exported function: a Go panic must never
// unwind into the C program, so it becomes errno EIO (set through ret,
// which the export returns) and a note on stderr.
func guard(op string, ret *C.int) {
	if r := recover(); r != nil {
		fmt.Fprintf(os.Stderr, "softrdma: internal error in %s: %v\n%s", op, r, debug.Stack())
		if ret != nil { // nil: a function that returns nothing
			*ret = C.EIO
		}
	}
}

// guardNeg is guard for functions that return a count or a negative
// errno (ibv_poll_cq).
func guardNeg(op string, ret *C.int) {
	if r := recover(); r != nil {
		fmt.Fprintf(os.Stderr, "softrdma: internal error in %s: %v\n%s", op, r, debug.Stack())
		*ret = -C.EIO
	}
}
