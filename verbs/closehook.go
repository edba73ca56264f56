package verbs

import (
	"slices"
	"sync"
)

// CloseNotifier is implemented by contexts that tell the layers built on
// them (the connection manager, sockets over RDMA) when they close, so
// that closing a device is all it takes to end what runs on it: no
// layer needs to be detached first.
type CloseNotifier interface {
	// OnClose registers f to run once when the context's Close begins,
	// before it releases its resources (so f may still destroy objects
	// and send). f must not call the context's Close. If the context is
	// already closed, f runs at once, in the caller. remove unregisters f;
	// it may be called at any time, also after f ran.
	OnClose(f func()) (remove func())
}

// CloseHooks is the list of functions a provider runs when its context
// closes; a provider embeds it to implement CloseNotifier and calls
// RunCloseHooks at the start of Close. The zero value is empty and ready
// to use. It is safe for concurrent use.
type CloseHooks struct {
	mu    sync.Mutex
	next  uint64
	hooks map[uint64]func()
	ran   bool
}

// OnClose registers f (CloseNotifier).
func (h *CloseHooks) OnClose(f func()) (remove func()) {
	h.mu.Lock()
	if h.ran {
		h.mu.Unlock()
		f()
		return func() {}
	}
	if h.hooks == nil {
		h.hooks = map[uint64]func(){}
	}
	h.next++
	key := h.next
	h.hooks[key] = f
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.hooks, key)
		h.mu.Unlock()
	}
}

// RunCloseHooks runs every registered function once, in the order they
// were registered, holding no lock; later calls do nothing, and functions
// registered afterwards run at once.
func (h *CloseHooks) RunCloseHooks() {
	h.mu.Lock()
	if h.ran {
		h.mu.Unlock()
		return
	}
	h.ran = true
	hooks := h.hooks
	h.hooks = nil
	h.mu.Unlock()
	keys := make([]uint64, 0, len(hooks))
	for k := range hooks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hooks[k]()
	}
}
