// Package handle maps integers that C code keeps to the Go values they
// stand for, as runtime/cgo.Handle does, with a lookup cheap enough for
// every ibv_post_send and ibv_poll_cq: an index into chunks read without
// a lock, where cgo.Handle hashes into a sync.Map (44 ns a lookup, 2 % of
// a C program's post over the C library).
//
// A handle carries its slot's generation: a slot is reused after Delete,
// and a stale handle (a program that uses an object it destroyed) is
// reported as invalid rather than resolving to the slot's new value.
package handle

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// A Handle is a value's slot (low slotBits bits, plus one: 0 is never a
// handle) and the slot's generation when the value was stored (the bits
// above, modulo their range).
type Handle uintptr

const (
	chunkBits = 10
	// slotBits is 32 where a uintptr has 64 bits; where it has 32 (the C
	// side keeps a uintptr_t), 20 bits of slot and 12 of generation.
	slotBits = 20 + 12*(bits.UintSize/64)
	slotMask = 1<<slotBits - 1
	genMask  = 1<<(bits.UintSize-slotBits) - 1
)

type entry struct {
	v   any
	gen uint32
}

type chunk [1 << chunkBits]atomic.Pointer[entry]

// at returns slot's place in cs; the caller has checked that cs reaches it.
func at(cs []*chunk, slot uint32) *atomic.Pointer[entry] {
	return &cs[slot>>chunkBits][slot&(1<<chunkBits-1)]
}

var table struct {
	mu     sync.Mutex
	chunks atomic.Pointer[[]*chunk] // grown by copy, never shrunk
	gens   []uint32                 // per slot, under mu
	free   []uint32                 // slots to reuse, under mu
}

// New returns a handle for v, valid until Delete.
func New(v any) Handle {
	table.mu.Lock()
	defer table.mu.Unlock()
	var slot uint32
	if n := len(table.free); n > 0 {
		slot = table.free[n-1]
		table.free = table.free[:n-1]
	} else {
		slot = uint32(len(table.gens))
		if slot >= slotMask {
			panic("handle: too many live handles")
		}
		table.gens = append(table.gens, 0)
		var cs []*chunk
		if p := table.chunks.Load(); p != nil {
			cs = *p
		}
		if int(slot>>chunkBits) >= len(cs) {
			grown := append(cs[:len(cs):len(cs)], new(chunk))
			table.chunks.Store(&grown)
			cs = grown
		}
	}
	table.gens[slot] = (table.gens[slot] + 1) & genMask
	gen := table.gens[slot]
	at(*table.chunks.Load(), slot).Store(&entry{v: v, gen: gen})
	return Handle(uintptr(gen)<<slotBits | uintptr(slot+1))
}

// lookup returns h's entry, or nil if h is not a live handle.
func (h Handle) lookup() *entry {
	slot := uint32(h&slotMask) - 1
	p := table.chunks.Load()
	if h&slotMask == 0 || p == nil || int(slot>>chunkBits) >= len(*p) {
		return nil
	}
	e := at(*p, slot).Load()
	if e == nil || e.gen != uint32(h>>slotBits) {
		return nil
	}
	return e
}

// Value returns the value h stands for. It panics if h is not a live
// handle, as cgo.Handle.Value does (the C library's entry points recover
// and return an error).
func (h Handle) Value() any {
	e := h.lookup()
	if e == nil {
		panic(fmt.Sprintf("handle: invalid handle %#x", uintptr(h)))
	}
	return e.v
}

// Delete invalidates h. It panics if h is not a live handle.
func (h Handle) Delete() {
	table.mu.Lock()
	defer table.mu.Unlock()
	if h.lookup() == nil {
		panic(fmt.Sprintf("handle: invalid handle %#x", uintptr(h)))
	}
	slot := uint32(h&slotMask) - 1
	at(*table.chunks.Load(), slot).Store(nil)
	table.free = append(table.free, slot)
}
