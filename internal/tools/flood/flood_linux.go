package flood

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/wire"
)

// flood sends o's mix until o.duration has passed or ctx ends, in batches of one
// sendmmsg each.
func flood(ctx context.Context, o *floodOpts) (*floodResult, error) {
	var (
		conn  net.PacketConn
		err   error
		ports []uint16
	)
	if o.spoof {
		if ports, err = udpPorts(o.from); err != nil {
			return nil, err
		}
		if len(ports) == 0 {
			return nil, fmt.Errorf("-spoof: no UDP socket is bound on %v (is the peer running?)", o.from)
		}
		if conn, err = rawSendSocket(); err != nil {
			return nil, err
		}
	} else {
		conn, err = net.ListenPacket("udp4", net.JoinHostPort(o.from.String(), "0"))
		if err != nil {
			return nil, err
		}
		ports = []uint16{uint16(conn.LocalAddr().(*net.UDPAddr).Port)}
	}
	defer conn.Close()
	if !o.spoof {
		// Don't Fragment: Linux then sends IP ID 0, which the ICRC
		// covers (the spoofed packets' IP header is ours, DF set).
		if err := setDontFragment(conn); err != nil {
			return nil, err
		}
	}

	// Build the packets up front (ICRC included): the loop only sends.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xf100d))
	pkts := make([][]byte, o.variants)
	kinds := make([]string, o.variants)
	for i := range pkts {
		kind := o.kinds[i%len(o.kinds)]
		pkt := floodPacket(kind, o.qpn, o.payload, rng)
		port := ports[i%len(ports)]
		wire.PutICRC(pkt, &wire.IPInfo{Src: o.from, Dst: o.to.Addr(), SrcPort: port, DstPort: o.to.Port(), DF: true})
		if o.spoof {
			pkt = append(ipUDPHeader(o, port, len(pkt)), pkt...)
		}
		pkts[i], kinds[i] = pkt, kind
	}
	dst := net.Addr(&net.UDPAddr{IP: o.to.Addr().AsSlice(), Port: int(o.to.Port())})
	if o.spoof {
		dst = &net.IPAddr{IP: o.to.Addr().AsSlice()}
	}
	const batch = 64
	msgs := make([]ipv4.Message, batch)
	pc := ipv4.NewPacketConn(conn)
	r := &floodResult{perKind: map[string]uint64{}, ports: ports}
	start := time.Now()
	end := start.Add(o.duration)
	next := 0
	for n := 0; ; n++ {
		if n%16 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			break
		}
		for i := range msgs {
			msgs[i].Buffers = [][]byte{pkts[(next+i)%len(pkts)]}
			msgs[i].Addr = dst
		}
		sent, err := pc.WriteBatch(msgs, 0)
		if err != nil && sent <= 0 {
			r.errors++
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return nil, err
			}
			continue
		}
		for i := range sent {
			r.perKind[kinds[(next+i)%len(pkts)]]++
		}
		r.sent += uint64(sent)
		next = (next + sent) % len(pkts)
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// rawSendSocket opens a send-only raw IPv4 socket (IPPROTO_RAW: the
// caller writes the IP header, and the socket receives nothing, so it
// takes no copy of the host's UDP traffic the way an IPPROTO_UDP raw
// socket would).
func rawSendSocket() (net.PacketConn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("-spoof needs a raw socket (root): %w", err)
	}
	f := os.NewFile(uintptr(fd), "raw")
	defer f.Close()
	return net.FilePacketConn(f)
}

// ipUDPHeader returns the IPv4 and UDP headers of a spoofed datagram from
// -from:port carrying n bytes: DF set and ID 0 (as Linux sends from an
// unconnected DF socket, which the ICRC covers); the kernel fills in the
// IP checksum. The UDP checksum is 0 (none), as rxe sends.
func ipUDPHeader(o *floodOpts, port uint16, n int) []byte {
	h := make([]byte, 28, 28+n)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(28+n))
	binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
	h[8], h[9] = 64, unix.IPPROTO_UDP
	src, dst := o.from.As4(), o.to.Addr().As4()
	copy(h[12:], src[:])
	copy(h[16:], dst[:])
	binary.BigEndian.PutUint16(h[20:], port)
	binary.BigEndian.PutUint16(h[22:], o.to.Port())
	binary.BigEndian.PutUint16(h[24:], uint16(8+n))
	return h
}

// setDontFragment sets IP_MTU_DISCOVER to IP_PMTUDISC_DO on c.
func setDontFragment(c net.PacketConn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("flood: %T has no file descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}); err != nil {
		return err
	}
	return serr
}
