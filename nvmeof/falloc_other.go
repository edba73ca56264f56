//go:build !linux

package nvmeof

import (
	"errors"
	"os"
)

func fallocZero(*os.File, int64, int64) error  { return errors.ErrUnsupported }
func fallocPunch(*os.File, int64, int64) error { return errors.ErrUnsupported }
