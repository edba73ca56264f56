package cm

// Lifetimes on kernel devices. cm runs no agent on a device whose kernel
// runs the connection manager (kernel.go), so a kernelWatch plays the
// agent's part of lifetime.go there: it registers with the device's close
// hook (verbs.CloseNotifier) the first time cm uses the device, and
// closing the device ends what cm runs on it:
//
//	dev.Close ──▶ close hook ──▶ kernelWatch.shutdown
//	                               ├─ Dial / Accept in progress: their context is cancelled
//	                               │  (cause ErrDeviceClosed), and shutdown waits until they returned
//	                               ├─ connections: Err ErrDeviceClosed, then Close (the kernel's DREQ,
//	                               │  cm's objects destroyed)
//	                               └─ listeners: Close; Accept returns ErrClosed wrapping ErrDeviceClosed
//
// The hook runs before the device releases anything, so every ID, QP and
// CQ cm made is gone before the device destroys what is left.

import (
	"context"
	"fmt"
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// errListenerDeviceClosed is what Accept returns on a kernel listener
// that its device's Close closed.
var errListenerDeviceClosed = fmt.Errorf("%w: %w", ErrClosed, ErrDeviceClosed)

// kernelWatch is what cm runs on one kernel device.
type kernelWatch struct {
	ctx verbs.Context

	mu        sync.Mutex // guards the fields below
	closed    bool
	conns     map[*Conn]struct{}
	listeners map[*Listener]struct{}
	attempts  map[*context.CancelCauseFunc]struct{}
	running   sync.WaitGroup // the attempts
}

// kernelWatches holds the watch of every kernel device cm is using.
var kernelWatches struct {
	mu sync.Mutex
	m  map[verbs.Context]*kernelWatch
}

// watchKernel returns ctx's watch, registering it with the device's
// close hook the first time. It fails with ErrDeviceClosed if the device
// is closed.
func watchKernel(ctx verbs.Context) (*kernelWatch, error) {
	kernelWatches.mu.Lock()
	w := kernelWatches.m[ctx]
	if w == nil {
		w = &kernelWatch{ctx: ctx, conns: map[*Conn]struct{}{}, listeners: map[*Listener]struct{}{},
			attempts: map[*context.CancelCauseFunc]struct{}{}}
		if kernelWatches.m == nil {
			kernelWatches.m = map[verbs.Context]*kernelWatch{}
		}
		kernelWatches.m[ctx] = w
		kernelWatches.mu.Unlock()
		if cn, ok := ctx.(verbs.CloseNotifier); ok {
			cn.OnClose(w.shutdown) // runs at once if ctx is closed already
		}
	} else {
		kernelWatches.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, w.closedErr()
	}
	return w, nil
}

func (w *kernelWatch) closedErr() error {
	return fmt.Errorf("%w (%s): open a device and use that (%w)", ErrDeviceClosed, w.ctx.Device().Name(), verbs.ErrInvalidState)
}

// attempt derives the context of a Dial or Accept exchange, cancelled
// with cause ErrDeviceClosed when the device closes; done must be called
// when the exchange returned.
func (w *kernelWatch) attempt(ctx context.Context) (actx context.Context, done func(), err error) {
	actx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		cancel(nil)
		return nil, nil, w.closedErr()
	}
	key := &cancel
	w.attempts[key] = struct{}{}
	w.running.Add(1)
	w.mu.Unlock()
	return actx, func() {
		w.mu.Lock()
		delete(w.attempts, key)
		w.mu.Unlock()
		cancel(nil)
		w.running.Done()
	}, nil
}

// attemptErr is the error of a failed exchange: ErrDeviceClosed if the
// device's Close ended it, else err.
func attemptErr(actx context.Context, err error) error {
	if context.Cause(actx) == ErrDeviceClosed {
		return ErrDeviceClosed
	}
	return err
}

// adopt makes c one of the connections closed with the device, until
// c.Close. It fails (and closes c) if the device is closed.
func (w *kernelWatch) adopt(c *Conn) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		c.closeWith(ErrDeviceClosed)
		c.Close()
		return ErrDeviceClosed
	}
	w.conns[c] = struct{}{}
	w.mu.Unlock()
	// Close runs c.owned last to first: forgetting c comes last.
	c.owned = append([]func() error{func() error {
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
		return nil
	}}, c.owned...)
	return nil
}

// addListener makes l one of the listeners closed with the device.
func (w *kernelWatch) addListener(l *Listener) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.closedErr()
	}
	w.listeners[l] = struct{}{}
	return nil
}

// removeListener forgets l (Listener.Close).
func (w *kernelWatch) removeListener(l *Listener) {
	w.mu.Lock()
	delete(w.listeners, l)
	w.mu.Unlock()
}

// shutdown is the device's close hook: it ends the exchanges in progress
// and waits for them, then closes the connections and the listeners.
func (w *kernelWatch) shutdown() {
	kernelWatches.mu.Lock()
	if kernelWatches.m[w.ctx] == w {
		delete(kernelWatches.m, w.ctx)
	}
	kernelWatches.mu.Unlock()

	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for cancel := range w.attempts {
		(*cancel)(ErrDeviceClosed)
	}
	w.mu.Unlock()
	w.running.Wait()

	w.mu.Lock()
	conns := make([]*Conn, 0, len(w.conns))
	for c := range w.conns {
		conns = append(conns, c)
	}
	listeners := make([]*Listener, 0, len(w.listeners))
	for l := range w.listeners {
		listeners = append(listeners, l)
	}
	w.mu.Unlock()
	// Every connection ends with ErrDeviceClosed before any is closed:
	// closing one sends its DREQ, which may reach a connection of the
	// same device (both ends on one host) and end it as disconnected.
	for _, c := range conns {
		c.closeWith(ErrDeviceClosed)
	}
	for _, c := range conns {
		c.Close()
	}
	for _, l := range listeners {
		l.kernel.devClosed.Store(true)
		l.Close()
	}
}

// acceptClosedErr is what Accept returns on a closed listener.
func (l *Listener) acceptClosedErr() error {
	if l.kernel != nil && l.kernel.devClosed.Load() {
		return errListenerDeviceClosed
	}
	return ErrClosed
}
