package cm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// route is what rdma_resolve_addr and rdma_resolve_route find: the local
// device, port and source GID that reach a destination address.
type route struct {
	ctx      verbs.Context
	port     uint8
	src      netip.Addr
	sgid     verbs.GID
	sgidIdx  int
	dgid     verbs.GID
	mtu      verbs.MTU
	hopLimit uint8
}

// sourceFor returns the local address the kernel's routing table picks
// for dst, as rdma_resolve_addr does: a connected UDP socket's local
// address (no packet is sent).
func sourceFor(dst netip.Addr) (netip.Addr, bool) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, false
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), true
}

// interfaceOf returns the interface that has address a, and the prefix.
func interfaceOf(a netip.Addr) (string, bool) {
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, ad := range addrs {
			if p, err := netip.ParsePrefix(ad.String()); err == nil && p.Addr().Unmap() == a {
				return ifi.Name, true
			}
		}
	}
	return "", false
}

// sameLink says whether a and b are on one interface's prefix (for
// loopback: both in 127.0.0.0/8).
func sameLink(a, b netip.Addr) bool {
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, ad := range addrs {
			if p, err := netip.ParsePrefix(ad.String()); err == nil && p.Contains(a) && p.Contains(b) {
				return true
			}
		}
	}
	return false
}

// addrsOf lists the IP addresses in a device port's GID table.
func addrsOf(vctx verbs.Context, port uint8) []netip.Addr {
	pa, err := vctx.QueryPort(port)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for i := 0; i < max(pa.GIDTblLen, 1); i++ {
		g, err := vctx.QueryGID(port, i)
		if err != nil {
			break
		}
		if !g.IsZero() {
			out = append(out, g.Addr().Unmap())
		}
	}
	return out
}

// localFor picks the address of vctx's port that should talk to dst: the
// same family, not link-local unless dst is, on dst's link if possible.
func localFor(vctx verbs.Context, port uint8, dst netip.Addr) (netip.Addr, bool) {
	var best netip.Addr
	for _, a := range addrsOf(vctx, port) {
		if a.Is4() != dst.Is4() || a.IsLinkLocalUnicast() != dst.IsLinkLocalUnicast() {
			continue
		}
		if sameLink(a, dst) {
			return a, true
		}
		if !best.IsValid() {
			best = a
		}
	}
	return best, best.IsValid()
}

// openedContexts lists the devices this process has opened.
func openedContexts() []verbs.Context {
	devs, _ := verbs.Devices()
	var out []verbs.Context
	for _, d := range devs {
		if c, ok := d.(verbs.Context); ok {
			out = append(out, c)
		}
	}
	return out
}

// resolveLocal finds the device for a local address (Listen): the given
// context, or an opened device that has the address, or (unspecified
// address) the first opened device, or the listed device of the
// interface that has the address, opened now.
func resolveLocal(local netip.Addr, o *Options) (verbs.Context, netip.Addr, error) {
	if o.Context != nil {
		if local.IsValid() && !local.IsUnspecified() {
			return o.Context, local, nil
		}
		for _, a := range addrsOf(o.Context, o.Port) {
			if !a.IsLinkLocalUnicast() && (!local.IsValid() || a.Is4() == local.Is4() || local.IsUnspecified()) {
				return o.Context, a, nil
			}
		}
		return nil, netip.Addr{}, verbs.Errorf("cm.Listen", verbs.ErrNotFound, "device %s has no usable address", o.Context.Device().Name())
	}
	for _, c := range openedContexts() {
		for _, a := range addrsOf(c, o.Port) {
			if a == local || (local.IsUnspecified() && !a.IsLinkLocalUnicast()) {
				return c, a, nil
			}
		}
	}
	if local.IsValid() && !local.IsUnspecified() {
		if c, err := openFor(local); err == nil {
			return c, local, nil
		}
	}
	return nil, netip.Addr{}, verbs.Errorf("cm.Listen", verbs.ErrNotFound, "no RDMA device has address %v: open one (soft.Open) or pass Options.Context", local)
}

// openFor opens the listed (not yet opened) device of the interface that
// has address a; softrdma names them "softrdma_<interface>".
func openFor(a netip.Addr) (verbs.Context, error) {
	ifname, ok := interfaceOf(a)
	if !ok {
		return nil, verbs.Errorf("cm", verbs.ErrNotFound, "no interface has address %v", a)
	}
	if c, ok := openKernelFor(ifname); ok {
		return c, nil // the kernel's device of the interface wins (kernel.go)
	}
	devs, _ := verbs.Devices()
	for _, d := range devs {
		if _, opened := d.(verbs.Context); opened || !strings.HasSuffix(d.Name(), "_"+ifname) {
			continue
		}
		return d.Open()
	}
	return nil, verbs.Errorf("cm", verbs.ErrNotFound, "no RDMA device on interface %s", ifname)
}

// resolveRoute finds the local device, port and GIDs towards raddr's IP.
// A device with a verbs.ServiceDirectory (shared memory) finds the peer
// by the service ID instead: the port in o.QPType's port space.
func resolveRoute(raddr netip.AddrPort, o *Options) (*route, error) {
	dst := raddr.Addr()
	r := &route{port: o.Port, dgid: verbs.GIDFromAddr(dst), hopLimit: 64}
	sd, byService := o.Context.(verbs.ServiceDirectory)
	switch {
	case byService:
		g, err := sd.LookupService(o.Port, dst, ServiceID(portSpace(o.QPType), raddr.Port()))
		if errors.Is(err, verbs.ErrNotFound) {
			// What the peer's CM would answer a REQ for a port nobody
			// listens on: rdma_cm programs that retry on it work as over
			// a wire.
			if o.QPType == verbs.QPTypeUD {
				return nil, &SIDRError{Status: wire.SIDRUnsupportedService}
			}
			return nil, &RejectError{Reason: wire.RejInvalidServiceID}
		}
		if err != nil {
			return nil, err
		}
		r.dgid = g
		src := addrsOf(o.Context, o.Port)
		if len(src) == 0 {
			return nil, verbs.Errorf("cm.Dial", verbs.ErrNotFound, "device %s has no GID", o.Context.Device().Name())
		}
		r.ctx, r.src = o.Context, src[0]
	case o.Context != nil:
		a, ok := localFor(o.Context, o.Port, dst)
		if !ok {
			return nil, verbs.Errorf("cm.Dial", verbs.ErrNotFound, "device %s has no address that can reach %v", o.Context.Device().Name(), dst)
		}
		r.ctx, r.src = o.Context, a
	default:
		src, _ := sourceFor(dst)
		var fallback verbs.Context
		var fallbackAddr netip.Addr
		for _, c := range openedContexts() {
			for _, a := range addrsOf(c, o.Port) {
				if a == src {
					r.ctx, r.src = c, a
				}
			}
			if r.ctx != nil {
				break
			}
			if a, ok := localFor(c, o.Port, dst); ok && sameLink(a, dst) && (fallback == nil || fallbackAddr == dst) {
				fallback, fallbackAddr = c, a
			}
		}
		if r.ctx == nil && fallback != nil {
			r.ctx, r.src = fallback, fallbackAddr
		}
		if r.ctx == nil && src.IsValid() {
			c, err := openFor(src)
			if err != nil {
				return nil, err
			}
			r.ctx, r.src = c, src
		}
		if r.ctx == nil {
			return nil, verbs.Errorf("cm.Dial", verbs.ErrNotFound, "no RDMA device reaches %v: open one (soft.Open) or pass Options.Context", dst)
		}
	}
	idx, g, err := gidIndex(r.ctx, r.port, r.src)
	if err != nil {
		return nil, err
	}
	r.sgidIdx, r.sgid = idx, g
	pa, err := r.ctx.QueryPort(r.port)
	if err != nil {
		return nil, err
	}
	r.mtu = pa.ActiveMTU
	if r.mtu == 0 {
		r.mtu = verbs.MTU1024
	}
	return r, nil
}

// Resolve returns the device that Dial would use to reach address
// ("IP:port", network "rdma"), and the local address it would connect
// from, without connecting. Callers that must register memory before
// dialing (to offer it in the REQ's private data, as rsocket does) create
// their PD, QP and MRs on it and pass them in Options.
func Resolve(network, address string, opts *Options) (verbs.Context, netip.Addr, error) {
	raddr, err := splitAddr(network, address)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	o := opts.withDefaults()
	r, err := resolveRoute(raddr, &o)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return r.ctx, r.src, nil
}

// portSpace is the rdma_cm port space of a QP type: UDP for UD (SIDR),
// TCP for the connected types.
func portSpace(t verbs.QPType) PortSpace {
	if t == verbs.QPTypeUD {
		return PortSpaceUDP
	}
	return PortSpaceTCP
}

// lookupHost turns the host part of an address into an IP address: a
// literal as it is, else a name through the system's resolver (as net's
// dialers do), taking for "rdma" an IPv4 address if the name has one
// (devices most often sit on one, as 127.0.0.1 for "localhost"), for
// "rdma4" or "rdma6" one of that family.
func lookupHost(network, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil || host == "" {
		return a, err
	}
	family := "ip"
	switch network {
	case "rdma4":
		family = "ip4"
	case "rdma6":
		family = "ip6"
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, family, host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0].Unmap(), nil // LookupNetIP returns at least one or an error
}

// lookupTimeout bounds a name lookup.
const lookupTimeout = 10 * time.Second
