package roce

// The device's two lookup tables, read on every packet without a lock and
// changed in O(1) amortised time (registering an MR or creating a QP used
// to copy the whole table: 4096 QPs took 674 ms to set up).
//
//	keyTable: lkey/rkey → MR. Open addressing over a power-of-two array of
//	          atomic slots; writers (under mu) store into the live array and
//	          replace it with a rehashed one only when it is half full
//	          (counting deleted slots), so readers always see a consistent
//	          array and a key's probe ends at an empty slot.
//	qpTable:  QPN → QP. A two-level array of atomic pointers, indexed by
//	          QPN − firstQPN; chunks are allocated as QPNs are used.

import (
	"sync"
	"sync/atomic"
)

// keyEntry is one key of the key table.
type keyEntry struct {
	key uint32
	mr  *MR
}

// deleted marks a slot whose key was removed: probes go on past it.
var deleted = &keyEntry{}

type keySlots []atomic.Pointer[keyEntry]

// keyTable maps lkeys and rkeys (disjoint random values) to MRs.
type keyTable struct {
	mu    sync.Mutex // serialises writers
	slots atomic.Pointer[keySlots]
	used  int // live keys (under mu)
	dead  int // deleted slots in the live array (under mu)
}

func keyHash(k uint32) uint32 { return k * 0x9E3779B1 }

// lookup returns the MR with local or remote key k, or nil. It takes no
// lock.
func (t *keyTable) lookup(k uint32) *MR {
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
		if e != deleted && e.key == k {
			return e.mr
		}
	}
}

// has reports whether k is in the table. Precondition: mu held.
func (t *keyTable) has(k uint32) bool { return k == 0 || t.lookup(k) != nil }

// insert adds k → mr. Precondition: mu held, k not in the table.
func (t *keyTable) insert(k uint32, mr *MR) {
	sp := t.slots.Load()
	if sp == nil || 2*(t.used+t.dead+1) > len(*sp) {
		t.rehash(max(64, 4*(t.used+1)))
		sp = t.slots.Load()
	}
	s := *sp
	mask := uint32(len(s) - 1)
	i := keyHash(k) & mask
	for e := s[i].Load(); e != nil && e != deleted; e = s[i].Load() {
		i = (i + 1) & mask
	}
	if s[i].Load() == deleted {
		t.dead--
	}
	s[i].Store(&keyEntry{key: k, mr: mr})
	t.used++
}

// remove deletes k. Precondition: mu held.
func (t *keyTable) remove(k uint32) {
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
		if e != deleted && e.key == k {
			s[i].Store(deleted)
			t.used--
			t.dead++
			return
		}
	}
}

// rehash moves the live keys into a new array of at least n slots, which
// readers then see at once. Precondition: mu held.
func (t *keyTable) rehash(n int) {
	size := 64
	for size < n {
		size *= 2
	}
	ns := make(keySlots, size)
	mask := uint32(size - 1)
	if sp := t.slots.Load(); sp != nil {
		for i := range *sp {
			e := (*sp)[i].Load()
			if e == nil || e == deleted {
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

// each calls f for every key until f returns false. It takes no lock: an
// MR registered or deregistered meanwhile may or may not be seen.
func (t *keyTable) each(f func(k uint32, mr *MR) bool) {
	sp := t.slots.Load()
	if sp == nil {
		return
	}
	for i := range *sp {
		if e := (*sp)[i].Load(); e != nil && e != deleted && !f(e.key, e.mr) {
			return
		}
	}
}

// qpChunk is one second-level array of the QP table.
type qpChunk [qpChunkLen]atomic.Pointer[QP]

const qpChunkLen = 1024

// qpTable maps QPNs to QPs.
type qpTable struct {
	chunks [(maxQP + qpChunkLen - 1) / qpChunkLen]atomic.Pointer[qpChunk]

	mu   sync.Mutex // serialises add and remove
	next uint32     // QPN indexes below next have been handed out
	free []uint32   // indexes of destroyed QPs, reused last in first out
}

// get returns the QP numbered qpn, or nil. It takes no lock.
func (t *qpTable) get(qpn uint32) *QP {
	i := qpn - firstQPN
	if i >= maxQP {
		return nil
	}
	c := t.chunks[i/qpChunkLen].Load()
	if c == nil {
		return nil
	}
	return c[i%qpChunkLen].Load()
}

// add gives qp a QPN. It returns false if the table is full.
func (t *qpTable) add(qp *QP) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next >= maxQP {
			return false
		}
		i = t.next
		t.next++
	}
	c := t.chunks[i/qpChunkLen].Load()
	if c == nil {
		c = new(qpChunk)
		t.chunks[i/qpChunkLen].Store(c)
	}
	qp.qpn = firstQPN + i
	c[i%qpChunkLen].Store(qp)
	return true
}

// remove frees qp's QPN.
func (t *qpTable) remove(qp *QP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := qp.qpn - firstQPN
	t.chunks[i/qpChunkLen].Load()[i%qpChunkLen].Store(nil)
	t.free = append(t.free, i)
}
