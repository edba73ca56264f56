package rdmanet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// Connect without the IB connection manager: for providers that carry no
// CM MADs (the shared-memory provider has no QP1), and for programs that
// already hold a stream to the peer. Both sides call Connect on the two
// ends of one stream (TCP, a Unix socket, a pipe):
//
//	both: newConn (QP in INIT, receives posted)
//	  ──► oobHello: magic, version, QPN, PSN, GID, rs_conn_data (76 bytes)
//	  ◄── the peer's hello: checked as the CM's private data is
//	both: cm.Connect (RTR, RTS) ──► one byte: ready ◄── the peer's
//	both: start (credits for the second ring half go out now)
//
// The ready byte keeps the first credit message from reaching a QP that
// is not yet in RTR. The stream stays open for the connection's life: its
// end is the peer's disconnect, as the CM's DREQ is, and Close closes it.

const (
	oobMagic    = "RSOB"
	oobVersion  = 1
	oobHelloLen = 4 + 4 + 4 + 4 + 16 + connDataLen // magic, version, QPN, PSN, GID, conn data
	oobReady    = 'R'
)

// Connect makes an rsocket connection with a peer that calls Connect on
// the other end of stream, over the device cfg.Context (required), by
// exchanging the QPs' endpoints and rsocket's connection data through
// stream instead of the IB CM. ctx bounds the exchange. On success the
// connection owns stream: the peer closing its end is a disconnect, and
// Close closes it; stream must carry nothing else meanwhile. LocalAddr
// and RemoteAddr are stream's. On failure stream is left open.
//
// This works over any provider, the shared-memory one included; a C
// rsocket peer cannot connect this way (rsocket always uses rdma_cm).
func Connect(ctx context.Context, stream net.Conn, cfg *Config) (*Conn, error) {
	c, err := connectOOB(ctx, stream, cfg)
	if err != nil {
		return nil, &net.OpError{Op: "connect", Net: "rdma", Source: stream.LocalAddr(), Addr: stream.RemoteAddr(), Err: err}
	}
	return c, nil
}

func connectOOB(ctx context.Context, stream net.Conn, cfg *Config) (*Conn, error) {
	conf := cfg.withDefaults()
	vctx := conf.Context
	if vctx == nil {
		return nil, errors.New("rdmanet: Connect needs Config.Context, the device to use")
	}
	// ctx's end interrupts the exchange (and then ctx.Err() is set, so
	// the error says why).
	stop := context.AfterFunc(ctx, func() { stream.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			stream.SetDeadline(time.Time{})
		}
	}()
	p := cm.DefaultParams()
	p.RetryCnt, p.RNRRetry = 7, 7 // as rs_do_connect
	gidIndex, gid, err := sourceGID(vctx, p.Port)
	if err != nil {
		return nil, err
	}
	p.SGIDIndex = uint8(gidIndex)
	if pa, err := vctx.QueryPort(p.Port); err == nil && pa.ActiveMTU.Valid() {
		p.PathMTU = pa.ActiveMTU
	}
	c, cd, err := newConn(vctx, conf)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Conn, error) {
		c.release()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	var psn [4]byte
	rand.Read(psn[:])
	local := cm.Endpoint{QPN: c.qp.QPNum(), PSN: binary.BigEndian.Uint32(psn[:]) & 0xFFFFFF, GID: gid}
	hello := make([]byte, oobHelloLen)
	encodeHello(hello, local, cd)
	peerHello := make([]byte, oobHelloLen)
	if err := exchange(stream, hello, peerHello); err != nil {
		return fail(fmt.Errorf("rdmanet: exchanging endpoints: %w", err))
	}
	remote, peer, err := decodeHello(peerHello)
	if err != nil {
		return fail(err)
	}
	if err := cm.Connect(c.qp, local, remote, &p); err != nil {
		return fail(err)
	}
	ready := []byte{0}
	if err := exchange(stream, []byte{oobReady}, ready); err != nil || ready[0] != oobReady {
		return fail(fmt.Errorf("rdmanet: the peer did not say ready (%q, %v)", ready, err))
	}
	if !stop() {
		return fail(ctx.Err())
	}
	stream.SetDeadline(time.Time{})
	c.start(newOOBSession(stream), stream.LocalAddr(), stream.RemoteAddr(), peer)
	return c, nil
}

// exchange writes out while it reads len(in) bytes: both sides send
// first, and a stream without buffering (net.Pipe) would block both.
func exchange(stream net.Conn, out, in []byte) error {
	werr := make(chan error, 1)
	go func() {
		_, err := stream.Write(out)
		werr <- err
	}()
	_, rerr := io.ReadFull(stream, in)
	if rerr != nil {
		stream.SetDeadline(time.Unix(1, 0)) // the write may wait for a reader that will not come
	}
	if err := <-werr; err != nil && rerr == nil {
		return err
	}
	return rerr
}

// sourceGID picks the GID to connect from: the first of port's GIDs that
// is not IPv6 link-local (a soft device lists its link-local GID first
// and sends only from its IP addresses' GIDs; a shm device has one GID).
func sourceGID(vctx verbs.Context, port uint8) (int, verbs.GID, error) {
	var first error
	for i := 0; i < 16; i++ {
		g, err := vctx.QueryGID(port, i)
		if err != nil {
			if first == nil {
				first = err
			}
			break
		}
		if a := g.Addr(); a.IsValid() && !a.IsUnspecified() && !a.IsLinkLocalUnicast() {
			return i, g, nil
		}
	}
	return 0, verbs.GID{}, fmt.Errorf("rdmanet: device %s has no GID to connect from: %v", vctx.Device().Name(), first)
}

func encodeHello(b []byte, e cm.Endpoint, cd connData) {
	copy(b, oobMagic)
	binary.BigEndian.PutUint32(b[4:], oobVersion)
	binary.BigEndian.PutUint32(b[8:], e.QPN)
	binary.BigEndian.PutUint32(b[12:], e.PSN)
	copy(b[16:32], e.GID[:])
	cd.encode(b[32:])
}

// decodeHello checks a peer's hello as Accept checks the CM's private
// data.
func decodeHello(b []byte) (cm.Endpoint, connData, error) {
	var e cm.Endpoint
	if len(b) != oobHelloLen || string(b[:4]) != oobMagic {
		return e, connData{}, fmt.Errorf("%w: not an rdmanet endpoint (% x)", errProtocol, b[:min(len(b), 8)])
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != oobVersion {
		return e, connData{}, fmt.Errorf("%w: endpoint version %d, want %d", errProtocol, v, oobVersion)
	}
	e.QPN = binary.BigEndian.Uint32(b[8:])
	e.PSN = binary.BigEndian.Uint32(b[12:])
	copy(e.GID[:], b[16:32])
	if e.QPN == 0 || e.QPN > 0xFFFFFF || e.PSN > 0xFFFFFF {
		return e, connData{}, fmt.Errorf("%w: endpoint QPN %#x PSN %#x", errProtocol, e.QPN, e.PSN)
	}
	cd, err := decodeConnData(b[32:])
	return e, cd, err
}

// oobSession is the session of a Connect: the stream ending is the
// peer's disconnect.
type oobSession struct {
	stream net.Conn
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	err    error
}

func newOOBSession(stream net.Conn) *oobSession {
	s := &oobSession{stream: stream, done: make(chan struct{})}
	go s.watch()
	return s
}

// watch reads the stream until it ends; the peer sends nothing more.
func (s *oobSession) watch() {
	var b [64]byte
	for {
		if _, err := s.stream.Read(b[:]); err != nil {
			s.mu.Lock()
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.err = err
			}
			s.mu.Unlock()
			close(s.done)
			return
		}
	}
}

func (s *oobSession) Done() <-chan struct{} { return s.done }

func (s *oobSession) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close closes the stream and waits for watch to end.
func (s *oobSession) Close() error {
	var err error
	s.once.Do(func() { err = s.stream.Close() })
	<-s.done
	return err
}
