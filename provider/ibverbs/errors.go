//go:build ibverbs && cgo && linux

package ibverbs

import (
	"errors"
	"syscall"

	"github.com/softrdma/softrdma/verbs"
)

// errnoErr maps an errno from libibverbs or the kernel to the verbs
// sentinel it means, keeping the errno's text in the message: op names
// the call, what says what was being done.
func errnoErr(op string, err error, what string) error {
	var e syscall.Errno
	if !errors.As(err, &e) {
		if err == nil {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "%s failed without an errno", what)
		}
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%s: %v", what, err)
	}
	return verbs.Errorf(op, sentinel(e), "%s: %v (errno %d, %s)", what, e.Error(), int(e), errnoName(e))
}

// errnoCode maps a return value that is an errno (ibv_post_send,
// ibv_modify_qp and friends return it instead of setting errno).
func errnoCode(op string, code int, what string) error {
	return errnoErr(op, syscall.Errno(code), what)
}

func sentinel(e syscall.Errno) error {
	switch e {
	case syscall.EINVAL, syscall.EFAULT, syscall.ERANGE, syscall.E2BIG:
		return verbs.ErrInvalidArgument
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPROTONOSUPPORT, syscall.EAFNOSUPPORT:
		return verbs.ErrNotSupported
	case syscall.ENOMEM, syscall.ENOSPC, syscall.EAGAIN, syscall.ENOBUFS:
		return verbs.ErrQueueFull
	case syscall.EBUSY:
		return verbs.ErrInUse
	case syscall.ENODEV, syscall.ENOENT, syscall.ENXIO:
		return verbs.ErrNotFound
	case syscall.EIO, syscall.ENETDOWN, syscall.ENETUNREACH, syscall.EHOSTUNREACH:
		return verbs.ErrUnreachable
	case syscall.EPERM, syscall.EACCES:
		return verbs.ErrInvalidArgument
	}
	return verbs.ErrInvalidArgument
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.ENOMEM:
		return "ENOMEM"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.EBUSY:
		return "EBUSY"
	case syscall.ENODEV:
		return "ENODEV"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EAGAIN:
		return "EAGAIN"
	case syscall.EFAULT:
		return "EFAULT"
	case syscall.EIO:
		return "EIO"
	case syscall.ENOSPC:
		return "ENOSPC"
	}
	return "errno"
}
