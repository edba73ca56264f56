//go:build linux

package main

// The kernel floor: two anchors that show what the kernel's UDP path alone
// costs on this host, so that a reader can tell how much of softrdma's gap
// to UCX over TCP is the kernel's UDP against its TCP and how much softrdma
// adds. No RoCEv2-over-UDP implementation (softrdma, or a userspace peer of
// Linux rxe) can beat them: they carry datagrams of its packets' sizes with
// nothing on top — no headers built or parsed, no ICRC, no ACKs, no verbs.
//
//	udp-busy  ping-pong of one datagram the size of an 8-byte RDMA WRITE ONLY
//	          with inline data (BTH 12 + RETH 16 + 8 + ICRC 4 = 40 bytes),
//	          one-way latency = round trip / 2. Each side: one goroutine
//	          locked to its thread, a non-blocking connected socket,
//	          recvfrom(MSG_DONTWAIT) polled in a loop, sendto; raw system
//	          calls, as softrdma's busy pollers make them. (softrdma's hop
//	          also carries the previous WRITE's 20-byte ACK, as a second
//	          GSO segment: its protocol, not the kernel's, so left out.)
//	udp-gso   a stream of UDP_SEGMENT (GSO) datagrams of 15 segments of
//	          4128 bytes (a WRITE ONLY at a 4096-byte path MTU: BTH 12 +
//	          RETH 16 + 4096 + ICRC 4, what softrdma sends per packet to a
//	          loopback peer; 15 is as many as its transport puts in one
//	          datagram of at most 65000 bytes), 8 datagrams per sendmmsg,
//	          to a UDP_GRO receiver that busy-polls recvmmsg(MSG_DONTWAIT),
//	          8 datagrams of up to 64 KiB per call. The receiver returns an
//	          8-byte credit (bytes received so far) every 512 KiB and the
//	          sender keeps at most 4 MiB beyond the last credit, so nothing
//	          overflows the 16 MiB receive buffer and nothing is lost, as in
//	          a reliable transport. Bandwidth counts what the segments would
//	          carry as RDMA payload (4096 bytes each, MB = 2^20), comparable
//	          with ib_write_bw; udp_MiBps counts the UDP payload.
//
// Both run through the Go baselines' machinery: the harness re-executes its
// own binary as _go-server / _go-client with -proto udp-busy or udp-gso.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/bench/internal/harness"
	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/wire"
)

const (
	// floorHeaders is what a RoCEv2 WRITE ONLY adds to its payload in the
	// UDP datagram: BTH, RETH and ICRC.
	floorHeaders = wire.BTHLen + wire.RETHLen + wire.ICRCLen
	floorMTU     = 4096                    // the path MTU softrdma uses on loopback
	floorSeg     = floorMTU + floorHeaders // one full-MTU WRITE ONLY packet
	// floorSegs is how many segments one GSO datagram carries: as many
	// as fit in udpChunk bytes, softrdma's transport's limit too.
	floorSegs   = udpChunk / floorSeg
	floorBatch  = 8               // datagrams per sendmmsg / recvmmsg
	floorWindow = 4 << 20         // UDP bytes the sender keeps beyond the last credit
	floorCredit = 512 << 10       // the receiver credits the sender every this many bytes
	floorIdle   = 3 * time.Second // a silent peer ends a run after this
	floorSpins  = 4096            // empty polls between two looks at the clock
)

// The floor's tools column. No ", " in them: summarize joins a series'
// tools with it and splits them on it.
var (
	floorPPTool = fmt.Sprintf("udp-busy ping-pong (%d B datagrams)", floorPacket(latSize))
	floorBWTool = fmt.Sprintf("udp-gso stream (%d×%d B segments)", floorSegs, floorSeg)
)

// floorPacket is the UDP payload of an RDMA WRITE ONLY with payload bytes.
func floorPacket(payload int) int { return payload + floorHeaders }

// floorPlan is the layout of a udp-gso stream of n messages of size bytes
// of RDMA payload: a byte stream cut into full-MTU packets, the last one
// shorter if the total is not a multiple of the MTU; udpBytes is what the
// datagrams carry, headers included.
func floorPlan(size, n int) (segs, udpBytes int64) {
	payload := int64(size) * int64(n)
	segs = (payload + floorMTU - 1) / floorMTU
	return segs, payload + segs*floorHeaders
}

// floorDatagram is the length of the next GSO datagram when remaining UDP
// bytes are left to send: floorSegs full segments or what is left (only
// the stream's very last segment is short, so only a last datagram ends
// in a short segment, as UDP_SEGMENT requires).
func floorDatagram(remaining int64) int {
	return int(min(int64(floorSegs*floorSeg), remaining))
}

// floorProbe says why the udp-gso anchor cannot run on this kernel, or nil.
func floorProbe() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, floorSeg); err != nil {
		return fmt.Errorf("UDP_SEGMENT (GSO, Linux 4.18): %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		return fmt.Errorf("UDP_GRO (Linux 5.0): %w", err)
	}
	return nil
}

// floorSocket opens a non-blocking UDP socket bound to addr with 16 MiB
// buffers (past rmem_max if root) and returns its bound address.
func floorSocket(addr string) (int, netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return -1, ap, fmt.Errorf("-addr: %w", err)
	}
	family := unix.AF_INET
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, ap, err
	}
	forceBuffers(int(fd))
	if err := unix.Bind(fd, sockaddr(ap)); err != nil {
		unix.Close(fd)
		return -1, ap, fmt.Errorf("bind %v: %w", ap, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, ap, err
	}
	return fd, addrPort(sa), nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
}

func addrPort(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// rawRecv is recvfrom(2) without a source address, straight to the
// kernel: the sockets are non-blocking, so the call never parks the thread.
func rawRecv(fd int, b []byte, flags int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// rawSend is send(2) on a connected socket.
func rawSend(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// poller spins on a non-blocking call with softrdma's own idle policy
// (internal/spin: a sched_yield every few empty polls, so two pollers
// that share a CPU hand it over as softrdma's do) and gives up when
// nothing has happened for floorIdle; it looks at the clock every
// floorSpins polls.
type poller struct {
	spins int
	last  time.Time
}

func newPoller() poller { return poller{last: time.Now()} }

// progress records that something arrived.
func (p *poller) progress() { p.spins = 0; p.last = time.Now() }

// idle records an empty poll and reports whether the peer has been silent
// for floorIdle.
func (p *poller) idle() bool {
	p.spins++
	spin.Idle(p.spins)
	if p.spins%floorSpins != 0 {
		return false
	}
	return time.Since(p.last) > floorIdle
}

// awaitPeer waits (in poll(2), not spinning: the client may take a while
// to start) for the first datagram, connects fd to its sender and returns
// it, still queued.
func awaitPeer(fd int) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 30_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("no client within 30 s")
		}
		break
	}
	var one [1]byte
	_, from, err := unix.Recvfrom(fd, one[:], unix.MSG_PEEK)
	if err != nil {
		return err
	}
	return unix.Connect(fd, from)
}

// floorServer serves one udp-busy or udp-gso client on o.addr; ready is
// called with the bound address once the client may start.
func floorServer(o goOpts, ready func(addr string)) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, bound, err := floorSocket(o.addr)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if o.proto == "udp-gso" {
		if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
			return fmt.Errorf("UDP_GRO: %w", err)
		}
	}
	ready(bound.String())
	if err := awaitPeer(fd); err != nil {
		return err
	}
	if o.proto == "udp-gso" {
		return floorReceive(fd, o)
	}
	buf := make([]byte, 65536)
	p := newPoller()
	for {
		k, err := rawRecv(fd, buf, unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN:
			if p.idle() {
				return nil // the goodbye was lost; the client is done
			}
			continue
		case err != nil:
			return err
		case k == 0:
			return nil // the client's goodbye
		}
		p.progress()
		if _, err := rawSend(fd, buf[:k]); err != nil {
			return err
		}
	}
}

// floorReceive is the udp-gso receiver: it counts the bytes of the
// coalesced datagrams and credits them back until the whole plan arrived.
func floorReceive(fd int, o goOpts) error {
	_, total := floorPlan(o.size, o.n)
	bufs := make([]byte, floorBatch*65536)
	iovs := make([]unix.Iovec, floorBatch)
	hdrs := make([]unix.Mmsghdr, floorBatch)
	for i := range hdrs {
		iovs[i].Base = &bufs[i*65536]
		iovs[i].SetLen(65536)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	var got, credited int64
	var credit [8]byte
	p := newPoller()
	for got < total {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), floorBatch, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			if p.idle() {
				return fmt.Errorf("received %d of %d bytes, then nothing for %v", got, total, floorIdle)
			}
			continue
		}
		if e != 0 {
			return fmt.Errorf("recvmmsg: %w", e)
		}
		p.progress()
		for i := range int(r) {
			if hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				return errors.New("a coalesced datagram did not fit in 64 KiB")
			}
			got += int64(hdrs[i].Len)
		}
		if got-credited >= floorCredit || got >= total {
			binary.LittleEndian.PutUint64(credit[:], uint64(got))
			if _, err := rawSend(fd, credit[:]); err != nil && err != unix.EAGAIN {
				return err
			}
			credited = got
		}
	}
	if got != total {
		return fmt.Errorf("received %d bytes, more than the %d sent", got, total)
	}
	return nil
}

// floorClient runs the udp-busy ping-pong or the udp-gso stream against
// the server at o.addr and returns its metrics.
func floorClient(o goOpts) (metrics, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	srv, err := netip.ParseAddrPort(o.addr)
	if err != nil {
		return nil, fmt.Errorf("-addr: %w", err)
	}
	local := "127.0.0.1:0"
	if srv.Addr().Is6() && !srv.Addr().Is4In6() {
		local = "[::1]:0"
	}
	fd, _, err := floorSocket(local)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sockaddr(srv)); err != nil {
		return nil, fmt.Errorf("connect %v: %w", srv, err)
	}
	if o.proto == "udp-gso" {
		return floorSend(fd, o)
	}
	return floorPingPong(fd, o)
}

// floorPingPong is the udp-busy client: warm-up and timed round trips of
// one floorPacket(o.size)-byte datagram, then a goodbye.
func floorPingPong(fd int, o goOpts) (metrics, error) {
	buf := make([]byte, floorPacket(o.size))
	rbuf := make([]byte, 65536)
	once := func() error {
		if _, err := rawSend(fd, buf); err != nil {
			return err
		}
		p := newPoller()
		for {
			k, err := rawRecv(fd, rbuf, unix.MSG_DONTWAIT)
			if err == unix.EAGAIN {
				if p.idle() {
					return fmt.Errorf("no reply for %v (datagram lost?)", floorIdle)
				}
				continue
			}
			if err != nil {
				return err
			}
			if k != len(buf) {
				return fmt.Errorf("reply of %d bytes, want %d", k, len(buf))
			}
			return nil
		}
	}
	for range o.warm {
		if err := once(); err != nil {
			return nil, err
		}
	}
	samples := make([]time.Duration, o.n)
	for i := range samples {
		t0 := time.Now()
		if err := once(); err != nil {
			return nil, err
		}
		samples[i] = time.Since(t0) / 2
	}
	for range 3 {
		rawSend(fd, nil) // goodbye
	}
	m := metrics(harness.LatMetrics(samples))
	m["datagram_bytes"] = float64(len(buf))
	return m, nil
}

// floorSend is the udp-gso sender: GSO datagrams of floorSegs segments,
// floorBatch per sendmmsg, at most floorWindow bytes beyond the receiver's
// last credit.
func floorSend(fd int, o goOpts) (metrics, error) {
	segs, total := floorPlan(o.size, o.n)
	// The datagrams are cut from a 2 MiB buffer in turn, as packets are
	// gathered from a registered region, not sent from one hot line.
	const span = 2 << 20
	src := make([]byte, span+floorSegs*floorSeg)
	for i := range src {
		src[i] = byte(i)
	}
	iovs := make([]unix.Iovec, floorBatch)
	hdrs := make([]unix.Mmsghdr, floorBatch)
	ctrl := make([]byte, unix.CmsgSpace(2))
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
	cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	cm.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(ctrl[unix.CmsgLen(0):], floorSeg)
	for i := range hdrs {
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
		hdrs[i].Hdr.Control = &ctrl[0]
		hdrs[i].Hdr.SetControllen(len(ctrl))
	}
	var sent, acked int64
	var off, dgrams int
	var credit [8]byte
	p := newPoller()
	t0 := time.Now()
	for acked < total {
		if sent == total || sent-acked > floorWindow/2 {
			k, err := rawRecv(fd, credit[:], unix.MSG_DONTWAIT)
			switch {
			case err == nil && k == len(credit):
				if v := int64(binary.LittleEndian.Uint64(credit[:])); v > acked {
					acked = v
					p.progress()
				}
			case err != nil && err != unix.EAGAIN:
				return nil, err
			}
		}
		if sent == total || sent-acked >= floorWindow {
			if p.idle() {
				return nil, fmt.Errorf("no credit for %v after %d of %d bytes credited (datagrams lost?)", floorIdle, acked, total)
			}
			continue
		}
		k := 0
		for next := sent; k < floorBatch && next < total && next-acked < floorWindow; k++ {
			n := floorDatagram(total - next)
			iovs[k].Base = &src[off]
			iovs[k].SetLen(n)
			off = (off + n) % span
			next += int64(n)
		}
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(k), 0, 0, 0)
		if e == unix.EAGAIN || e == unix.ENOBUFS {
			continue // the cut datagrams are cut again; off moved on, which does not matter
		}
		if e != 0 {
			return nil, fmt.Errorf("sendmmsg: %w", e)
		}
		for i := range int(r) {
			sent += int64(iovs[i].Len)
		}
		dgrams += int(r)
	}
	ns := float64(time.Since(t0).Nanoseconds())
	payload := float64(o.size) * float64(o.n)
	return metrics{
		"bw_MiBps":       payload / ns * 1e9 / (1 << 20),
		"udp_MiBps":      float64(total) / ns * 1e9 / (1 << 20),
		"msg_rate_M":     float64(o.n) / ns * 1e3,
		"segments":       float64(segs),
		"datagrams":      float64(dgrams),
		"segment_bytes":  floorSeg,
		"udp_bytes":      float64(total),
		"segs_per_dgram": floorSegs,
	}, nil
}
