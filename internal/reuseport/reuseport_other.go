//go:build !linux

package reuseport

import (
	"errors"
	"net/netip"
)

// SlotBits and Slots are as on Linux, where addresses can be shared.
const (
	SlotBits = 6
	Slots    = 1 << SlotBits
)

// Share is a device's membership of shared addresses; on this system
// there is none (Prepare fails), and a device binds its address alone.
type Share struct{}

// Prepare fails: sharing an address needs Linux's eBPF socket steering.
func Prepare([]netip.AddrPort) (*Share, error) {
	return nil, errors.ErrUnsupported
}

// Shared reports that addr is not shared: nothing here can share it.
func Shared(netip.AddrPort) (bool, error) { return false, nil }

func (*Share) Join([]int) error          { return errors.ErrUnsupported }
func (*Share) Slot() uint32              { return 0 }
func (*Share) ClaimService(uint64) error { return errors.ErrUnsupported }
func (*Share) ReleaseService(uint64)     {}
func (*Share) Close()                    {}
