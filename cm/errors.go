package cm

// How the connection manager's errors read to Go code written for package
// net: a refusal (a REJ, or an ICMP port unreachable for the REQ) matches
// syscall.ECONNREFUSED as a TCP RST to a SYN does, and a timeout is a
// net.Error whose Timeout is true and that matches os.ErrDeadlineExceeded
// and context.DeadlineExceeded.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"syscall"
)

// Is makes every REJ (nobody listens on the port, the listener's backlog
// is full, the application rejected) match syscall.ECONNREFUSED.
func (e *RejectError) Is(target error) bool { return target == syscall.ECONNREFUSED }

// timeoutError is ErrTimeout's type.
type timeoutError struct{}

func (timeoutError) Error() string {
	return "cm: timed out waiting for the peer's connection manager"
}

// Timeout and Temporary make it a net.Error that timed out.
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Is matches os.ErrDeadlineExceeded and context.DeadlineExceeded, the
// errors net's timeouts match.
func (timeoutError) Is(target error) bool {
	return target == os.ErrDeadlineExceeded || target == context.DeadlineExceeded
}

// UnreachableError is returned by Dial when the network answered the
// connection request with an error: an ICMP port unreachable (nothing
// listens for RoCEv2 at the address; Err is syscall.ECONNREFUSED) or a
// host or network unreachable (syscall.EHOSTUNREACH, ENETUNREACH). As
// with TCP, it comes at once instead of after the request's retries.
// errors.Is(err, syscall.ECONNREFUSED) tells a refusal.
type UnreachableError struct {
	Addr netip.Addr // where the request went
	Err  error      // what the network said, a syscall.Errno
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cm: no RoCEv2 connection manager at %v (ICMP error): %v", e.Addr, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }
