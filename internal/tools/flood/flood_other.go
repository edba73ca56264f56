//go:build !linux

package main

import (
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

func flood(o *floodOpts) (*floodResult, error) {
	return nil, fmt.Errorf("softrdma flood runs on Linux only (it sends with sendmmsg and, with -spoof, a raw socket): %w", verbs.ErrNotSupported)
}
