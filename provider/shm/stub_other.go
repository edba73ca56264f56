//go:build !linux

package shm

import "github.com/softrdma/softrdma/verbs"

// Device is a shared-memory device. Outside Linux it cannot be opened.
type Device struct{ verbs.Context }

// Open returns verbs.ErrNotSupported: memfd, SCM_RIGHTS and futexes are
// Linux's.
func Open(cfg Config) (*Device, error) {
	return nil, verbs.Errorf("shm.Open", verbs.ErrNotSupported, "the shared-memory provider needs Linux (memfd, SCM_RIGHTS, futex)")
}

// Devices lists nothing outside Linux.
func (provider) Devices() ([]verbs.Device, error) { return nil, nil }
