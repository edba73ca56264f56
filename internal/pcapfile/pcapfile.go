// Package pcapfile is softrdma's one reader of packet captures, for tests
// and tools: it opens a pcap or pcapng file (as tcpdump, tshark and
// Wireshark write them) with gopacket's pure-Go pcapgo, decodes each frame
// with gopacket's layers, and hands back the UDP datagrams (with the raw IP
// and UDP headers, as the RoCEv2 ICRC covers them) or the TCP segments.
//
// It imports no softrdma package, so wire's own tests can use it. Captured
// bytes are returned as read; nothing is validated beyond what decoding
// the headers needs. Functions are safe for concurrent use.
package pcapfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// RoCEv2Port is the RoCEv2 UDP port (IBTA annex A17). It is repeated here
// from wire.UDPPort because wire's tests import this package.
const RoCEv2Port = 4791

// IP is what a frame's IP header says about it.
type IP struct {
	// Header is the IP header as captured: IPv4 with any options, or the
	// 40-byte IPv6 fixed header.
	Header   []byte
	Src, Dst netip.Addr // IPv4 addresses for IPv4, IPv6 ones otherwise
	ID       uint16     // IPv4 identification; 0 for IPv6
	DF       bool       // IPv4 Don't Fragment; false for IPv6
	TTL      uint8      // IPv4 TTL or IPv6 hop limit
}

// Datagram is one UDP datagram of a capture.
type Datagram struct {
	Frame            int // 1-based frame number in the file, as Wireshark counts
	IP               IP
	Header           []byte // the 8-byte UDP header
	SrcPort, DstPort uint16
	Payload          []byte // the UDP payload, cut at the UDP length
}

// Segment is one TCP segment of a capture.
type Segment struct {
	Frame            int
	IP               IP
	SrcPort, DstPort uint16
	Seq              uint32
	SYN, FIN, RST    bool
	Payload          []byte
}

// RoCEv2 returns every UDP datagram to or from port 4791 in the capture at
// path, in capture order: each one's Payload runs from the BTH through the
// ICRC. A frame cut short by the capture's snap length is an error.
func RoCEv2(path string) ([]Datagram, error) {
	var out []Datagram
	err := each(path, func(frame int, p gopacket.Packet, ip IP, cut bool) error {
		u, ok := p.TransportLayer().(*layers.UDP)
		if !ok || (u.SrcPort != RoCEv2Port && u.DstPort != RoCEv2Port) {
			return nil
		}
		if cut || int(u.Length) != len(u.Contents)+len(u.Payload) {
			return fmt.Errorf("frame %d: UDP datagram truncated by the capture (capture with -s 0)", frame)
		}
		out = append(out, Datagram{Frame: frame, IP: ip, Header: u.Contents, SrcPort: uint16(u.SrcPort), DstPort: uint16(u.DstPort), Payload: u.Payload})
		return nil
	})
	return out, err
}

// TCP returns every TCP segment in the capture at path, in capture order.
func TCP(path string) ([]Segment, error) {
	var out []Segment
	err := each(path, func(frame int, p gopacket.Packet, ip IP, cut bool) error {
		t, ok := p.TransportLayer().(*layers.TCP)
		if !ok {
			return nil
		}
		if cut {
			return fmt.Errorf("frame %d: TCP segment truncated by the capture (capture with -s 0)", frame)
		}
		out = append(out, Segment{Frame: frame, IP: ip, SrcPort: uint16(t.SrcPort), DstPort: uint16(t.DstPort),
			Seq: t.Seq, SYN: t.SYN, FIN: t.FIN, RST: t.RST, Payload: t.Payload})
		return nil
	})
	return out, err
}

// packetReader is what pcapgo's pcap and pcapng readers have in common.
type packetReader interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// each decodes every IP frame of the capture at path and calls f with its
// 1-based frame number. Errors name the file.
//
// cut says that the capture kept less of the frame than was on the wire.
// Not gopacket's Metadata().Truncated: the decoders set it too, for a
// layer above the transport that they guessed from a port and could not
// decode, and a RoCEv2 datagram from UDP source port 44818 (EtherNet/IP
// to gopacket), decoded as that, was reported cut (an interop capture of
// NVMe-oF under loss failed its ICRC check so, on a random port).
func each(path string, f func(frame int, p gopacket.Packet, ip IP, cut bool) error) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	br := bufio.NewReader(file)
	var r packetReader
	// A pcapng file starts with a Section Header Block, type 0x0A0D0D0A.
	if magic, _ := br.Peek(4); bytes.Equal(magic, []byte{0x0A, 0x0D, 0x0D, 0x0A}) {
		r, err = pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
	} else {
		r, err = pcapgo.NewReader(br)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for frame := 1; ; frame++ {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: frame %d: %w", path, frame, err)
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.NoCopy)
		ip, ok := ipOf(p)
		if !ok {
			continue
		}
		if err := f(frame, p, ip, ci.CaptureLength < ci.Length); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// ipOf returns what p's IP header says, if p has one.
func ipOf(p gopacket.Packet) (IP, bool) {
	switch l := p.NetworkLayer().(type) {
	case *layers.IPv4:
		src, _ := netip.AddrFromSlice(l.SrcIP.To4())
		dst, _ := netip.AddrFromSlice(l.DstIP.To4())
		return IP{Header: l.Contents, Src: src, Dst: dst, ID: l.Id, DF: l.Flags&layers.IPv4DontFragment != 0, TTL: l.TTL}, true
	case *layers.IPv6:
		src, _ := netip.AddrFromSlice(l.SrcIP.To16())
		dst, _ := netip.AddrFromSlice(l.DstIP.To16())
		return IP{Header: l.Contents, Src: src, Dst: dst, TTL: l.HopLimit}, true
	}
	return IP{}, false
}
