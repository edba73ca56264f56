package verbsobj

import "github.com/softrdma/softrdma/verbs"

// AccessMask holds the access flags a memory region may have.
const AccessMask = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessMWBind

// CheckAccess validates the access flags of RegMR or AllocMR (op): known
// bits only, and remote write or atomic access only with local write
// (IBTA 10.6.3.1; ibv_reg_mr fails with EINVAL).
func CheckAccess(op string, access verbs.Access) error {
	if access&^AccessMask != 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "unknown access flags %v", access&^AccessMask)
	}
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "remote write or atomic access requires AccessLocalWrite too (IBTA 10.6.3.1)")
	}
	return nil
}

// CheckLength validates the length of the memory RegMR (len(buf)) or
// AllocMR is asked to register.
func CheckLength(op string, n int) error {
	if n <= 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "length %d: a region must have at least one byte", n)
	}
	return nil
}

// Span returns the n bytes at virtual address addr of a region whose
// first byte, buf[0], has address base; false if they are not all inside
// it. The values may come from the network: it never overflows.
func Span(buf []byte, base, addr, n uint64) ([]byte, bool) {
	if addr < base {
		return nil, false
	}
	off := addr - base
	size := uint64(len(buf))
	if off > size || n > size-off {
		return nil, false
	}
	return buf[off : off+n], true
}

// Permits reports whether a region with access have allows need.
func Permits(have, need verbs.Access) bool { return have&need == need }

// CheckAtomic validates an atomic work request when it is posted, as
// rxe's validate_send_wr does (EINVAL): the SGEs add up to the 8 bytes
// the operation returns, and the remote address is 8-byte aligned (IBTA
// 9.4.5: a misaligned atomic is an invalid request).
func CheckAtomic(op string, length, remoteAddr uint64) error {
	if length != 8 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "atomic operations move 8 bytes; the SGEs add up to %d", length)
	}
	if remoteAddr&7 != 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "atomic at remote address %#x: it must be 8-byte aligned", remoteAddr)
	}
	return nil
}
