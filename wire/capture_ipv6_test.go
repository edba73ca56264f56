package wire

import (
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"
)

// ipv6CaptureDir holds RoCEv2 over IPv6 between Linux rxe (fd77::2, GID
// index 2) and softrdma (fd77::1), captured on the VM fixture's bridge
// (see ../testdata/rxe-pcaps/ipv6/README.md).
const ipv6CaptureDir = "../testdata/rxe-pcaps/ipv6"

// TestCapturesIPv6: every packet of both senders carries an ICRC computed
// over the IPv6 header with traffic class, flow label and hop limit
// masked: recomputed from the real headers and from IPInfo it matches, it
// still matches with those three fields changed (softrdma's packets carry
// the kernel's automatic flow label, rxe's flow label 0), and it no longer
// matches with an address or the payload length changed. rxe sends UDP
// checksum 0 over IPv6, which a receiving socket must accept.
func TestCapturesIPv6(t *testing.T) {
	rxe := netip.MustParseAddr("fd77::2")
	files, err := filepath.Glob(filepath.Join(ipv6CaptureDir, "*.pcap"))
	if err != nil || len(files) < 2 {
		t.Fatalf("IPv6 captures in %s: %v, %v", ipv6CaptureDir, files, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			pkts := readCapture(t, path)
			bySender := map[netip.Addr]int{}
			flowLabels := map[uint32]bool{}
			for _, cp := range pkts {
				var p Packet
				if err := Parse(cp.pkt, &p); err != nil {
					t.Fatalf("frame %d: Parse: %v", cp.frame, err)
				}
				if len(cp.ipHdr) != 40 || cp.ipHdr[0]>>4 != 6 || cp.ip.Src.Is4() {
					t.Fatalf("frame %d: not IPv6: %x", cp.frame, cp.ipHdr)
				}
				bySender[cp.ip.Src]++
				flowLabels[binary.BigEndian.Uint32(cp.ipHdr)&0xFFFFF] = true
				body := cp.pkt[:len(cp.pkt)-ICRCLen]
				if got := ICRCFromHeaders(cp.ipHdr, cp.udpHdr, body); got != p.ICRC {
					t.Errorf("frame %d %v: ICRCFromHeaders = %#08x, packet has %#08x", cp.frame, p.BTH.Opcode(), got, p.ICRC)
				}
				if !CheckICRC(cp.pkt, &cp.ip) {
					t.Errorf("frame %d %v: CheckICRC from IPInfo false", cp.frame, p.BTH.Opcode())
				}
				if got := reencode(&p, &cp.ip); string(got) != string(cp.pkt) {
					t.Errorf("frame %d: re-encoded packet differs", cp.frame)
				}
				if cp.ip.Src == rxe {
					if c := binary.BigEndian.Uint16(cp.udpHdr[6:]); c != 0 {
						t.Errorf("frame %d: rxe's UDP checksum %#x, want 0", cp.frame, c)
					}
				}
				// Masked fields: traffic class, flow label, hop limit.
				h := append([]byte(nil), cp.ipHdr...)
				binary.BigEndian.PutUint32(h, 6<<28|0xA5<<20|0x5A5A5)
				h[7] = 1
				if got := ICRCFromHeaders(h, cp.udpHdr, body); got != p.ICRC {
					t.Errorf("frame %d: changing masked fields changed the ICRC", cp.frame)
				}
				// Covered fields: addresses and the payload length.
				for _, off := range []int{8, 24, 5} {
					h := append([]byte(nil), cp.ipHdr...)
					h[off] ^= 1
					if ICRCFromHeaders(h, cp.udpHdr, body) == p.ICRC {
						t.Errorf("frame %d: changing IPv6 header byte %d left the ICRC unchanged", cp.frame, off)
					}
				}
			}
			if len(bySender) != 2 || bySender[rxe] == 0 {
				t.Errorf("senders %v: want rxe (%v) and softrdma", bySender, rxe)
			}
			if len(flowLabels) < 2 {
				t.Errorf("flow labels %v: want rxe's 0 and softrdma's", flowLabels)
			}
			t.Logf("%d RoCEv2 packets over IPv6 checked (%v)", len(pkts), bySender)
		})
	}
}
