package verbsobj

import (
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
)

// Life is an object's lifetime: the objects that depend on it (a PD's
// MRs, QPs, SRQs and AHs; an SRQ's QPs) and whether it was destroyed.
// Safe for concurrent use. The zero value is a live object with no
// dependants.
type Life struct {
	users atomic.Int32
	dead  atomic.Bool
}

// Add counts delta more dependants (negative: fewer).
func (l *Life) Add(delta int32) { l.users.Add(delta) }

// Users returns how many dependants remain.
func (l *Life) Users() int32 { return l.users.Load() }

// Dead reports whether End succeeded.
func (l *Life) Dead() bool { return l.dead.Load() }

// Check returns an error wrapping verbs.ErrDestroyed, for op, if the
// object (what: "PD", "SRQ") is destroyed.
func (l *Life) Check(op, what string) error {
	if l.dead.Load() {
		return verbs.Errorf(op, verbs.ErrDestroyed, "the %s was destroyed", what)
	}
	return nil
}

// End destroys the object for op: ErrInUse while dependants (named by
// deps: "MRs, QPs, SRQs or AHs") remain, ErrDestroyed the second time.
// libibverbs returns EBUSY for the first; the second is a use after free
// there, an error here.
func (l *Life) End(op, what, deps string) error {
	if n := l.users.Load(); n > 0 {
		return verbs.Errorf(op, verbs.ErrInUse, "%d %s still use the %s; destroy them first", n, deps, what)
	}
	if !l.dead.CompareAndSwap(false, true) {
		return verbs.Errorf(op, verbs.ErrDestroyed, "the %s was already destroyed", what)
	}
	return nil
}

// CheckAH validates CreateAH's attributes as RoCE requires: a global
// route with a destination GID (the kernel's rdma_check_ah_attr fails a
// RoCE AH without a GRH with EINVAL). The provider then resolves the GID.
func CheckAH(attr *verbs.AHAttr) error {
	if attr == nil {
		return verbs.Errorf("CreateAH", verbs.ErrInvalidArgument, "attr is nil")
	}
	if !attr.IsGlobal || attr.GRH.DGID.IsZero() {
		return verbs.Errorf("CreateAH", verbs.ErrInvalidArgument, "RoCE needs a global route: set IsGlobal and GRH.DGID to the peer's GID")
	}
	return nil
}
