//go:build !linux && !darwin && !freebsd

package udp

import "errors"

// setDontFragment is not implemented here: the packets leave without
// Don't Fragment, with an ICRC computed as if it were set (see the package
// comment).
func setDontFragment(fd int, v6 bool) error { return errors.ErrUnsupported }
