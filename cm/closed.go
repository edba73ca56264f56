package cm

import (
	"fmt"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
)

// deviceClosed reports whether ctx was closed, for a device that can
// tell (verbs.CloseNotifier runs a hook registered after Close at once).
// Dial and Listen ask it before they look for a route or an address on
// the device, which a closed device no longer answers: the caller learns
// that the device was closed, not that no address was found.
func deviceClosed(ctx verbs.Context) bool {
	cn, ok := ctx.(verbs.CloseNotifier)
	if !ok {
		return false
	}
	var closed atomic.Bool
	cn.OnClose(func() { closed.Store(true) })()
	return closed.Load()
}

// closedDeviceErr is what op returns on a closed device.
func closedDeviceErr(op string, ctx verbs.Context) error {
	return fmt.Errorf("%s: %w (%s): open a device and use that (%w)", op, ErrDeviceClosed, ctx.Device().Name(), verbs.ErrInvalidState)
}
