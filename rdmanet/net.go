package rdmanet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
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
