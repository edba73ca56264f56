package roce

// The device's two lookup tables, read on every packet without a lock and
// changed in O(1) amortised time (registering an MR or creating a QP used
// to copy the whole table: 4096 QPs took 674 ms to set up).
//
//	idTable:  a 32-bit key → object. Open addressing over a power-of-two
//	          array of atomic slots; writers (under mu) store into the live
//	          array and replace it with a rehashed one only when it is half
//	          full (counting deleted slots), so readers always see a
//	          consistent array and a key's probe ends at an empty slot.
//	keyTable: lkey/rkey → MR, an idTable.
//	qpTable:  QPN → QP, an idTable; QPNs are random (unguessable by a
//	          peer, not reused soon).

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// idEntry is one key of an idTable.
type idEntry[T any] struct {
	key uint32
	val *T
	del bool // marks a slot whose key was removed: probes go on past it
}

type idSlots[T any] []atomic.Pointer[idEntry[T]]

// idTable maps 32-bit keys to objects.
type idTable[T any] struct {
	mu      sync.Mutex // serialises writers
	slots   atomic.Pointer[idSlots[T]]
	used    int         // live keys (under mu)
	dead    int         // deleted slots in the live array (under mu)
	deleted *idEntry[T] // the marker of deleted slots
}

// keyTable maps lkeys and rkeys (disjoint random values) to MRs.
type keyTable = idTable[MR]

func keyHash(k uint32) uint32 { return k * 0x9E3779B1 }

// lookup returns the object with key k, or nil. It takes no lock.
func (t *idTable[T]) lookup(k uint32) *T {
	sp := t.slots.Load()
	if sp == nil {
		return nil
	}
	s := *sp
	mask := uint32(len(s) - 1)
	for i := keyHash(k) & mask; ; i = (i + 1) & mask {
		e := s[i].Load()
		if e == nil {
			return nil
		}
		if !e.del && e.key == k {
			return e.val
		}
	}
}

// has reports whether k is in the table (0 always is: it is never a
// key). Precondition: mu held.
func (t *idTable[T]) has(k uint32) bool { return k == 0 || t.lookup(k) != nil }

// insert adds k → v. Precondition: mu held, k not in the table.
func (t *idTable[T]) insert(k uint32, v *T) {
	sp := t.slots.Load()
	if sp == nil || 2*(t.used+t.dead+1) > len(*sp) {
		t.rehash(max(64, 4*(t.used+1)))
		sp = t.slots.Load()
	}
	s := *sp
	mask := uint32(len(s) - 1)
	i := keyHash(k) & mask
	for e := s[i].Load(); e != nil && !e.del; e = s[i].Load() {
		i = (i + 1) & mask
	}
	if e := s[i].Load(); e != nil && e.del {
		t.dead--
	}
	s[i].Store(&idEntry[T]{key: k, val: v})
	t.used++
}

// remove deletes k. Precondition: mu held.
func (t *idTable[T]) remove(k uint32) {
	sp := t.slots.Load()
	if sp == nil {
		return
	}
	s := *sp
	mask := uint32(len(s) - 1)
	for i := keyHash(k) & mask; ; i = (i + 1) & mask {
		e := s[i].Load()
		if e == nil {
			return
		}
		if !e.del && e.key == k {
			if t.deleted == nil {
				t.deleted = &idEntry[T]{del: true}
			}
			s[i].Store(t.deleted)
			t.used--
			t.dead++
			return
		}
	}
}

// rehash moves the live keys into a new array of at least n slots, which
// readers then see at once. Precondition: mu held.
func (t *idTable[T]) rehash(n int) {
	size := 64
	for size < n {
		size *= 2
	}
	ns := make(idSlots[T], size)
	mask := uint32(size - 1)
	if sp := t.slots.Load(); sp != nil {
		for i := range *sp {
			e := (*sp)[i].Load()
			if e == nil || e.del {
				continue
			}
			j := keyHash(e.key) & mask
			for ns[j].Load() != nil {
				j = (j + 1) & mask
			}
			ns[j].Store(e)
		}
	}
	t.slots.Store(&ns)
	t.dead = 0
}

// each calls f for every key until f returns false. It takes no lock: a
// key added or removed meanwhile may or may not be seen.
func (t *idTable[T]) each(f func(k uint32, v *T) bool) {
	sp := t.slots.Load()
	if sp == nil {
		return
	}
	for i := range *sp {
		if e := (*sp)[i].Load(); e != nil && !e.del && !f(e.key, e.val) {
			return
		}
	}
}

// qpTable maps QPNs to QPs. QPNs are random in [firstQPN, 2^24): a peer
// cannot guess one QP's number from another's (24 bits, less the QPs in
// use), and a freed QPN is not handed out again while it is among the
// last recentQPNs freed, so a late packet for a destroyed QP does not
// reach its successor.
//
// With a slot (setSlot), every QPN carries it in its top bits and only
// the rest are random.
type qpTable struct {
	ids    idTable[QP]
	prefix uint32             // the slot's bits
	mask   uint32             // the random bits; 0: all 24
	recent [recentQPNs]uint32 // the QPNs freed last (under ids.mu)
	next   int
}

const recentQPNs = 1024

// get returns the QP numbered qpn, or nil. It takes no lock.
func (t *qpTable) get(qpn uint32) *QP { return t.ids.lookup(qpn) }

// add gives qp a random free QPN drawn with rnd. It returns false if the
// table is full.
func (t *qpTable) add(qp *QP, rnd func() uint32) bool {
	t.ids.mu.Lock()
	defer t.ids.mu.Unlock()
	if t.ids.used >= maxQP {
		return false
	}
	mask := t.mask
	if mask == 0 {
		mask = 0xFFFFFF
	}
	for {
		qpn := t.prefix | rnd()&mask
		if qpn < firstQPN || t.ids.has(qpn) || t.recentlyFreed(qpn) {
			continue
		}
		qp.qpn = qpn
		t.ids.insert(qpn, qp)
		return true
	}
}

// setSlot makes every QPN slot<<(24-bits) | random 24-bits bits.
func (t *qpTable) setSlot(slot uint32, bits int) error {
	if bits <= 0 || bits > 8 || slot >= 1<<bits {
		return fmt.Errorf("QPN slot %d of %d bits: want 1 to 8 bits and a slot that fits them", slot, bits)
	}
	t.prefix = slot << (24 - bits)
	t.mask = 1<<(24-bits) - 1
	return nil
}

func (t *qpTable) recentlyFreed(qpn uint32) bool {
	for _, q := range t.recent {
		if q == qpn {
			return true
		}
	}
	return false
}

// remove frees qp's QPN.
func (t *qpTable) remove(qp *QP) {
	t.ids.mu.Lock()
	defer t.ids.mu.Unlock()
	t.ids.remove(qp.qpn)
	t.recent[t.next] = qp.qpn
	t.next = (t.next + 1) % recentQPNs
}

// each calls f for every QP.
func (t *qpTable) each(f func(qp *QP)) {
	t.ids.each(func(_ uint32, qp *QP) bool { f(qp); return true })
}
