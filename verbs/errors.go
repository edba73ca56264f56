package verbs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the API returns wraps one of these, so callers
// can test with errors.Is; the message of the wrapping error says what was
// wrong and what to do.
var (
	// ErrInvalidArgument: a parameter is out of range or inconsistent
	// (libibverbs: EINVAL).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidState: the object is in a state that does not allow the call,
	// for example PostSend on a QP that is not in RTS.
	ErrInvalidState = errors.New("invalid state")
	// ErrNotSupported: the provider does not implement the feature
	// (libibverbs: EOPNOTSUPP).
	ErrNotSupported = errors.New("not supported")
	// ErrQueueFull: a work queue or completion queue has no room
	// (libibverbs: ENOMEM from ibv_post_send).
	ErrQueueFull = errors.New("queue full")
	// ErrInUse: the object still has dependants, for example a PD with MRs
	// or QPs, or a CQ that QPs still use (libibverbs: EBUSY).
	ErrInUse = errors.New("in use")
	// ErrDestroyed: the object was destroyed, deregistered or closed.
	ErrDestroyed = errors.New("destroyed")
	// ErrNotFound: no such device, port or GID index.
	ErrNotFound = errors.New("not found")
	// ErrUnreachable: the destination is known not to exist (the peer
	// device is gone, for example a shared-memory peer whose process
	// exited); unlike a lost packet, sending again will not help.
	ErrUnreachable = errors.New("unreachable")
)

// Error is the error type returned by the verbs API: Op names the call, Err
// is the sentinel it wraps, and Detail says what was wrong and what to do.
type Error struct {
	Op     string
	Err    error
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Op + ": " + e.Err.Error()
	}
	return e.Op + ": " + e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error. Providers use it so that every error reads alike.
func Errorf(op string, sentinel error, format string, args ...any) error {
	return &Error{Op: op, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}
