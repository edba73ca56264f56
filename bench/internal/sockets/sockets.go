// Package sockets opens the byte streams the benchmarks compare: Go's TCP
// on loopback, rdmanet over a soft RoCEv2 device (rdma_cm over loopback
// UDP), and rdmanet over a shared-memory device (the QPs connected over a
// TCP stream with rdmanet.Connect). bench/compare's Go loops and the gRPC
// benchmark (a module of its own, so that gRPC stays out of softrdma's
// go.mod) listen and dial through it, so every protocol runs over the same
// three transports set up the same way.
package sockets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/rdmanet"
	"github.com/softrdma/softrdma/verbs"
)

// Opts says which transport and where.
type Opts struct {
	// Proto is "tcp", "rdmanet" (a soft device per process) or
	// "rdmanet-shm" (a shared-memory device per process).
	Proto string
	// Addr is the address to listen on (host:port, port 0 for any) or to
	// dial.
	Addr string
	// Dev is this side's soft device address (Proto "rdmanet").
	Dev string
}

// Check reports what is wrong with o, or nil.
func (o Opts) Check() error {
	switch o.Proto {
	case "tcp", "rdmanet-shm":
		return nil
	case "rdmanet":
		if _, err := netip.ParseAddr(o.Dev); err != nil {
			return fmt.Errorf("proto rdmanet needs the soft device's address (-dev): %v", err)
		}
		return nil
	}
	return fmt.Errorf("unknown proto %q (want tcp, rdmanet or rdmanet-shm)", o.Proto)
}

// openDevice opens this side's device for the rdmanet protos.
func openDevice(o Opts) (verbs.Context, func(), error) {
	if o.Proto == "rdmanet-shm" {
		d, err := shm.Open(shm.Config{})
		if err != nil {
			return nil, nil, err
		}
		return d, func() { d.Close() }, nil
	}
	d, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(o.Dev)})
	if err != nil {
		return nil, nil, err
	}
	return d, func() { d.Close() }, nil
}

// listener is a net.Listener whose Close also closes the device.
type listener struct {
	net.Listener
	once sync.Once
	done func()
	// upgrade, for rdmanet-shm, turns an accepted TCP stream into rdmanet.
	upgrade func(net.Conn) (net.Conn, error)
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.upgrade == nil {
		return c, err
	}
	return l.upgrade(c)
}

func (l *listener) Close() error {
	err := l.Listener.Close()
	l.once.Do(l.done)
	return err
}

// Listen listens on o.Addr over o.Proto. Closing the listener closes the
// device too (connections it accepted then fail): close it last.
func Listen(o Opts) (net.Listener, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	switch o.Proto {
	case "tcp":
		return net.Listen("tcp", o.Addr)
	case "rdmanet":
		dev, done, err := openDevice(o)
		if err != nil {
			return nil, err
		}
		l, err := rdmanet.ListenConfig("rdma", o.Addr, &rdmanet.Config{Context: dev})
		if err != nil {
			done()
			return nil, err
		}
		return &listener{Listener: l, done: done}, nil
	}
	dev, done, err := openDevice(o)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		done()
		return nil, err
	}
	return &listener{Listener: l, done: done, upgrade: func(c net.Conn) (net.Conn, error) {
		return connect(c, dev)
	}}, nil
}

// connect turns a TCP stream into an rdmanet connection over dev.
func connect(tc net.Conn, dev verbs.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rdmanet.Connect(ctx, tc, &rdmanet.Config{Context: dev})
	if err != nil {
		tc.Close()
		return nil, err
	}
	return c, nil
}

// closer closes a connection, then its device.
type closer struct {
	net.Conn
	once *sync.Once
	done func()
}

func (c closer) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// CloseWrite shuts the sending side down (TCP and rdmanet both can).
func (c closer) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("sockets: the connection cannot half-close")
}

// Dial connects to addr over o.Proto (o.Addr is ignored). An rdmanet
// connection has a device of its own, closed with it.
func Dial(ctx context.Context, o Opts, addr string) (net.Conn, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Proto == "tcp" {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	dev, done, err := openDevice(o)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	if o.Proto == "rdmanet" {
		d := rdmanet.Dialer{Timeout: 10 * time.Second, Config: &rdmanet.Config{Context: dev}}
		c, err = d.DialContext(ctx, "rdma", addr)
	} else {
		var d net.Dialer
		var tc net.Conn
		if tc, err = d.DialContext(ctx, "tcp", addr); err == nil {
			c, err = connect(tc, dev)
		}
	}
	if err != nil {
		done()
		return nil, err
	}
	return closer{Conn: c, once: new(sync.Once), done: done}, nil
}

// OneConn wraps l so that the caller learns when the first connection it
// accepted is closed (the server's end of a benchmark run): Done is closed
// then.
type OneConn struct {
	net.Listener
	once sync.Once
	done chan struct{}
}

// NewOneConn wraps l.
func NewOneConn(l net.Listener) *OneConn { return &OneConn{Listener: l, done: make(chan struct{})} }

// Done is closed when the first accepted connection has been closed.
func (l *OneConn) Done() <-chan struct{} { return l.done }

func (l *OneConn) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watched{Conn: c, l: l}, nil
}

type watched struct {
	net.Conn
	l *OneConn
}

func (w *watched) Close() error {
	err := w.Conn.Close()
	w.l.once.Do(func() { close(w.l.done) })
	return err
}
