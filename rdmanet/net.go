package rdmanet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/cm"
)

// Addr is the address of an rsocket endpoint: the IP address of its RDMA
// device and its rdma_cm port (the TCP port space, as rsocket uses).
type Addr struct {
	AddrPort netip.AddrPort
}

// Network returns "rdma".
func (a *Addr) Network() string { return "rdma" }
func (a *Addr) String() string  { return a.AddrPort.String() }

// cmNetwork checks network: "rdma" (rdma4, rdma6), or "tcp" (tcp4, tcp6)
// since rsocket streams live in rdma_cm's TCP port space.
func cmNetwork(network string) error {
	switch network {
	case "rdma", "rdma4", "rdma6", "tcp", "tcp4", "tcp6":
		return nil
	}
	return net.UnknownNetworkError(network)
}

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
}

// Listen listens at address ("IP:port"; port 0 picks one) on network
// "rdma" or "tcp" with rsocket's defaults. Without an IP (":port",
// "0.0.0.0:port", "[::]:port") it listens on every device of the host,
// as cm.Listen does.
func Listen(network, address string) (net.Listener, error) {
	return ListenConfig(network, address, nil)
}

// ListenConfig is Listen with buffer sizes and a device from cfg.
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
	return &Listener{l: l, cfg: c, addr: &Addr{l.Addr()}, ctx: ctx, cancel: cancel}, nil
}

// acceptTimeout bounds one connection's handshake (REP → RTU).
const acceptTimeout = 30 * time.Second

// Accept waits for the next connection and completes its handshake: it
// checks the peer's rsocket connection data, creates the endpoint and
// answers with its own. Requests that are not rsocket's are rejected.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		req, err := l.l.Accept(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				err = net.ErrClosed
			}
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: err}
		}
		peer, err := decodeConnData(req.PrivateData)
		if err != nil {
			req.Reject(nil)
			continue
		}
		l.mu.Lock()
		cfg := l.cfg
		l.mu.Unlock()
		c, cd, err := newConn(req.Context(), cfg)
		if err != nil {
			req.Reject(nil)
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: err}
		}
		var pd [connDataLen]byte
		cd.encode(pd[:])
		ctx, cancel := context.WithTimeout(l.ctx, acceptTimeout)
		cmc, err := req.Accept(ctx, &cm.Options{PD: c.pd, QP: c.qp, PrivateData: pd[:], Context: req.Context()})
		cancel()
		if err != nil {
			c.release()
			if l.ctx.Err() != nil {
				return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.addr, Err: net.ErrClosed}
			}
			continue // that peer went away; wait for the next
		}
		c.start(cmc, &Addr{cmc.LocalAddr()}, &Addr{cmc.RemoteAddr()}, peer)
		return c, nil
	}
}

// Close stops listening; a blocked Accept returns net.ErrClosed.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.cancel()
		l.l.Close()
	})
	return nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.addr }

// Dialer dials rsocket listeners. The zero value is rsocket's defaults
// with no timeout.
type Dialer struct {
	// Timeout bounds the whole connect (address resolution, REQ, REP,
	// RTU); zero means none beyond the CM's own retries.
	Timeout time.Duration
	// Config sizes the buffers and may name the device.
	Config *Config
}

// Dial connects to address on network "rdma" or "tcp".
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// Dial connects to address.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address (rs_do_connect): it creates the endpoint
// on the device that reaches the address, offers its ring and target SGL
// in the REQ and takes the peer's from the REP. ctx bounds the connect
// only; once connected, ctx's end does not affect the connection.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.dial(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	return c, nil
}

func (d *Dialer) dial(ctx context.Context, network, address string) (*Conn, error) {
	if err := cmNetwork(network); err != nil {
		return nil, err
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	cfg := d.Config.withDefaults()
	vctx := cfg.Context
	if vctx == nil {
		var err error
		if vctx, _, err = cm.Resolve("rdma", address, nil); err != nil {
			return nil, err
		}
	}
	c, cd, err := newConn(vctx, cfg)
	if err != nil {
		return nil, err
	}
	var pd [connDataLen]byte
	cd.encode(pd[:])
	// rs_do_connect: flow control, 7 retries, 7 RNR retries (infinite).
	cmc, err := cm.Dial(ctx, "rdma", address, &cm.Options{Context: vctx, PD: c.pd, QP: c.qp, PrivateData: pd[:], RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		c.release()
		return nil, err
	}
	peer, err := decodeConnData(cmc.PeerPrivateData)
	if err != nil {
		cmc.Close()
		c.release()
		return nil, fmt.Errorf("rdmanet: %v: %w", address, err)
	}
	c.start(cmc, &Addr{cmc.LocalAddr()}, &Addr{cmc.RemoteAddr()}, peer)
	return c, nil
}

// SetConfig changes the buffer sizes of connections accepted from now on
// (as rsetsockopt on a listening rsocket sets those of the sockets it
// accepts). The device stays the listener's.
func (l *Listener) SetConfig(cfg *Config) {
	c := cfg.withDefaults()
	c.Context = l.l.Context()
	l.mu.Lock()
	l.cfg = c
	l.mu.Unlock()
}
