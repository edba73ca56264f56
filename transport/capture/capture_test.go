package capture

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/wire"
)

// TestCaptureICRC sends a packet over real UDP on loopback through a
// capturing transport and checks that the capture decodes as
// Ethernet/IPv4/UDP 4791-style framing with a valid IP checksum and that
// the ICRC the transport filled in verifies against the captured headers,
// for the sent and the received copy.
func TestCaptureICRC(t *testing.T) {
	const port = 47917
	a, err := udp.Listen(udp.Config{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, SourcePorts: -1, DisableGSO: true})
	if err != nil {
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	b, err := udp.Listen(udp.Config{Addr: netip.MustParseAddr("127.0.0.3"), Port: port, SourcePorts: -1, DisableGSO: true})
	if err != nil {
		a.Close()
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	var file bytes.Buffer
	w, err := NewWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := Wrap(a, w), Wrap(b, w)
	// A UD SEND ONLY-shaped packet: BTH (opcode 0x64), DETH, 8 bytes, ICRC.
	pkt := make([]byte, 12+8+8+4)
	pkt[0] = 0x64
	pkt[1] = 0x40
	binary.BigEndian.PutUint16(pkt[2:], 0xFFFF)
	binary.BigEndian.PutUint32(pkt[4:], 0x11)
	copy(pkt[20:], "payload!")
	if _, err := ta.Send([]transport.Datagram{{Buf: pkt, Peer: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port), Flow: 0x11}}); err != nil {
		t.Fatal(err)
	}
	rx := []transport.Datagram{{Buf: make([]byte, 2048)}}
	if n, err := tb.Recv(rx); err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if rx[0].ICRC != transport.ICRCOK {
		t.Fatalf("receiver's ICRC check: %v", rx[0].ICRC)
	}
	ta.Close()
	tb.Close()
	r, err := pcapgo.NewNgReader(&file, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		frames++
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		u, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || u == nil {
			t.Fatalf("frame %d does not decode as IPv4/UDP: %v", frames, p)
		}
		if u.SrcPort != port || u.DstPort != port {
			t.Fatalf("frame %d: ports %d → %d", frames, u.SrcPort, u.DstPort)
		}
		hdr := data[14 : 14+20]
		if fold(sum16(0, hdr)) != 0 {
			t.Fatalf("frame %d: bad IPv4 header checksum", frames)
		}
		roce := u.Payload
		want := binary.LittleEndian.Uint32(roce[len(roce)-4:])
		if got := wire.ICRCFromHeaders(hdr, data[34:42], roce[:len(roce)-4]); got != want {
			t.Fatalf("frame %d: ICRC %08x, recomputed from the captured headers %08x", frames, want, got)
		}
	}
	if frames != 2 {
		t.Fatalf("%d frames captured, want 2 (sent and received)", frames)
	}
}
