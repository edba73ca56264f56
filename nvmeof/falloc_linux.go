package nvmeof

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func fallocZero(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// fallocPunch deallocates; a file system or device that cannot says
// errors.ErrUnsupported.
func fallocPunch(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV) {
		return errors.ErrUnsupported
	}
	return err
}
