package cm

// Listeners on every device. rdma_cm binds a listener on the unspecified
// address to every RDMA device; softrdma lists one device per network
// interface (as Linux rxe has one per netdev), so a listener on ":port"
// listens on the device of every interface:
//
//	Listen(":7471") ──▶ devices this process opened (RoCE ones; a shared-memory
//	                   device is named in Options.Context instead)
//	                ──▶ the listed device of each interface not yet opened: opened
//	                 ╰─▶ one Listener per device, all queueing on one backlog

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/softrdma/softrdma/verbs"
)

// wildcardHost turns ":port" (no host, as net.Listen takes it) into
// "[::]:port", the unspecified address.
func wildcardHost(address string) string {
	if strings.HasPrefix(address, ":") {
		return "[::]" + address
	}
	return address
}

// listenAll listens on laddr's port on every device (Listen with an
// unspecified address and no Options.Context).
func listenAll(laddr netip.AddrPort, o *Options, address string) (*Listener, error) {
	ctxs, opened, err := allDevices(o.Port)
	if err != nil {
		return nil, err
	}
	l := &Listener{qpType: o.QPType, opts: *o, reqs: make(chan *ConnRequest, o.Backlog), closed: make(chan struct{}), opened: opened}
	l.opts.Context = nil
	for tries := 0; ; tries++ {
		port := laddr.Port()
		if port == 0 {
			port = uint16(1024 + randUint32()%64000)
		}
		err = nil
		for _, c := range ctxs {
			oc := *o
			oc.Context = c
			var local netip.Addr
			if _, local, err = resolveLocal(laddr.Addr(), &oc); err != nil {
				break
			}
			var p *Listener
			if p, err = listenOn(c, local, port, oc, address, l.reqs); err != nil {
				break
			}
			l.parts = append(l.parts, p)
		}
		if err == nil {
			l.addr = netip.AddrPortFrom(laddr.Addr(), port)
			return l, nil
		}
		for _, p := range l.parts {
			p.Close()
		}
		l.parts = nil
		if laddr.Port() != 0 || tries > 20 {
			for _, c := range opened {
				c.Close()
			}
			return nil, err
		}
	}
}

// allDevices returns the devices a listener on every device listens on:
// the opened devices that carry CM MADs and are not shared-memory ones,
// then the devices of the network interfaces that no opened device has
// yet, opened now (opened lists those, for the listener to close).
func allDevices(port uint8) (ctxs, opened []verbs.Context, err error) {
	devs, err := verbs.Devices()
	if err != nil {
		return nil, nil, err
	}
	usable := func(c verbs.Context) bool {
		_, gsi := c.(verbs.GSI)
		_, kernel := c.(verbs.KernelCM)
		_, byService := c.(verbs.ServiceDirectory)
		return (gsi || kernel) && !byService && len(addrsOf(c, port)) > 0
	}
	for _, d := range devs {
		if c, ok := d.(verbs.Context); ok && usable(c) {
			ctxs = append(ctxs, c)
		}
	}
	var openErr error
	ifs, _ := interfaces()
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 {
			continue
		}
		if c, ok := openKernelFor(ifi.Name); ok {
			// The kernel's RDMA device of the interface (kernel.go)
			// has its addresses; no softrdma device is opened there.
			if usable(c) && !slices.Contains(ctxs, c) {
				ctxs = append(ctxs, c)
			}
			continue
		}
		for _, d := range devs {
			if _, isOpen := d.(verbs.Context); isOpen || !strings.HasSuffix(d.Name(), "_"+ifi.Name) {
				continue
			}
			c, err := d.Open()
			if err != nil {
				// Its address may be taken (by another program's
				// device, without sharing): the others still listen.
				openErr = errors.Join(openErr, err)
				continue
			}
			if !usable(c) {
				c.Close()
				continue
			}
			ctxs = append(ctxs, c)
			opened = append(opened, c)
		}
	}
	if len(ctxs) == 0 {
		return nil, nil, verbs.Errorf("cm.Listen", verbs.ErrNotFound, "no RDMA device to listen on (%v): open one (soft.Open) or pass Options.Context", errOr(openErr, "no network interface has one"))
	}
	return ctxs, opened, nil
}

// interfaces lists the host's network interfaces (a variable for tests,
// which must not open devices on the host's interfaces).
var interfaces = net.Interfaces

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// Devices returns the devices the listener listens on: its device, or
// for a listener on every device each of them.
func (l *Listener) Devices() []verbs.Context {
	if l.parts == nil {
		return []verbs.Context{l.opts.Context}
	}
	out := make([]verbs.Context, len(l.parts))
	for i, p := range l.parts {
		out[i] = p.opts.Context
	}
	return out
}
