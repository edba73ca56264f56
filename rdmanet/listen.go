package rdmanet

// The listener runs each connection's handshake on a goroutine of its own,
// so that a request whose dialer never completes it cannot hold up the
// others:
//
//	cm.Listener.Accept ──▶ acceptLoop ──slot free?──▶ go handshake ──▶ ready ──▶ Accept
//	                              │ no: REJ, counted      │ decode, endpoint, REP, wait for the RTU
//	                              ▼                       ▼ deadline (HandshakeTimeout): dropped, counted
//
// A REQ needs no answer to be sent, so its source can be spoofed: each
// pending handshake costs the endpoint's buffers and a slot until its
// deadline. The slots (MaxPendingHandshakes) bound that cost, and the
// deadline, shorter than a dial's, frees them: a flood must fill every
// slot again each HandshakeTimeout to turn dialers away, and while slots
// are free a legitimate dial completes at once. Connections whose
// handshake completed keep their slot until Accept takes them, as a TCP
// backlog does.

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/cm"
)

// Defaults of Config.HandshakeTimeout and Config.MaxPendingHandshakes.
const (
	// DefaultHandshakeTimeout bounds one accepted request's handshake
	// (REP → RTU): long enough for one lost REP to be resent (rdma_cm
	// dialers ask for 4 s between tries), far shorter than a dial.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxPendingHandshakes bounds the handshakes in progress plus
	// the connections waiting for Accept.
	DefaultMaxPendingHandshakes = 64
)

// Listener accepts rsocket connections. It implements net.Listener and is
// safe for concurrent use.
type Listener struct {
	l      *cm.Listener
	cfg    Config
	addr   *Addr
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	mu     sync.Mutex // guards cfg

	slots chan struct{}  // one token per pending handshake or unaccepted connection
	ready chan accepted  // completed handshakes (and local failures) for Accept
	wg    sync.WaitGroup // acceptLoop and the handshakes

	refused, timedOut atomic.Uint64
}

type accepted struct {
	c   *Conn
	err error
}

// ListenerStats counts what a listener turned away.
type ListenerStats struct {
	// Refused counts requests rejected because MaxPendingHandshakes
	// handshakes or unaccepted connections were pending.
	Refused uint64
	// TimedOut counts handshakes whose dialer did not complete them
	// within HandshakeTimeout (or that failed otherwise on the peer's
	// side: a REJ, a DREQ).
	TimedOut uint64
}

// Stats returns the listener's counters.
func (l *Listener) Stats() ListenerStats {
	return ListenerStats{Refused: l.refused.Load(), TimedOut: l.timedOut.Load()}
}

// Listen listens at address ("IP:port"; port 0 picks one) on network
// "rdma" or "tcp" with rsocket's defaults.
func Listen(network, address string) (net.Listener, error) {
	return ListenConfig(network, address, nil)
}

// ListenConfig is Listen with buffer sizes, a device and handshake limits
// from cfg.
func ListenConfig(network, address string, cfg *Config) (*Listener, error) {
	if err := cmNetwork(network); err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	c := cfg.withDefaults()
	l, err := cm.Listen("rdma", address, &cm.Options{Context: c.Context})
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln := &Listener{l: l, cfg: c, addr: &Addr{l.Addr()}, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, c.MaxPendingHandshakes), ready: make(chan accepted, c.MaxPendingHandshakes)}
	ln.wg.Add(1)
	go ln.acceptLoop()
	return ln, nil
}

// acceptLoop takes the CM's requests as they come and starts a handshake
// for each while a slot is free.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		req, err := l.l.Accept(l.ctx)
		if err != nil {
			return // closed
		}
		select {
		case l.slots <- struct{}{}:
		default:
			l.refused.Add(1)
			req.Reject(nil)
			continue
		}
		l.mu.Lock()
		cfg := l.cfg
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(req, cfg)
	}
}

// handshake completes one request: it checks the peer's rsocket
// connection data, creates the endpoint and answers with its own, and
// waits for the RTU until cfg.HandshakeTimeout.
func (l *Listener) handshake(req *cm.ConnRequest, cfg Config) {
	defer l.wg.Done()
	keep := false
	defer func() {
		if !keep {
			<-l.slots
		}
	}()
	peer, err := decodeConnData(req.PrivateData)
	if err != nil {
		req.Reject(nil)
		return
	}
	c, cd, err := newConn(l.l.Context(), cfg)
	if err != nil {
		req.Reject(nil)
		keep = true
		l.ready <- accepted{err: err} // a local failure: Accept reports it
		return
	}
	var pd [connDataLen]byte
	cd.encode(pd[:])
	ctx, cancel := context.WithTimeout(l.ctx, cfg.HandshakeTimeout)
	cmc, err := req.Accept(ctx, &cm.Options{PD: c.pd, QP: c.qp, PrivateData: pd[:], Context: l.l.Context()})
	cancel()
	if err != nil {
		c.release()
		if l.ctx.Err() == nil {
			l.timedOut.Add(1)
		}
		return // that peer went away, or never was
	}
	c.start(cmc, &Addr{cmc.LocalAddr()}, &Addr{cmc.RemoteAddr()}, peer)
	keep = true
	l.ready <- accepted{c: c} // never blocks: ready has a place per slot
}

// Accept waits for the next connection whose handshake completed.
// Requests that are not rsocket's are rejected; handshakes the dialer
// does not complete within Config.HandshakeTimeout are dropped and do not
// hold up others.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case a := <-l.ready:
		<-l.slots
		if a.err != nil {
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: a.err}
		}
		return a.c, nil
	case <-l.ctx.Done():
		return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops listening: a blocked Accept returns net.ErrClosed, pending
// handshakes end, and connections not yet accepted are closed.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.cancel()
		l.l.Close()
		l.wg.Wait()
		for {
			select {
			case a := <-l.ready:
				if a.c != nil {
					a.c.Close()
				}
			default:
				return
			}
		}
	})
	return nil
}
