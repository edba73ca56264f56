package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/internal/pcapfile"
)

// captureDir holds Linux rxe traffic captured between two VMs (see its
// README.md).
const captureDir = "../testdata/rxe-pcaps"

// capPacket is one RoCEv2 packet from a capture, split at its headers.
type capPacket struct {
	frame  int    // 1-based frame number in the file, as tshark counts
	ipHdr  []byte // the IP header (v4 with options, or the v6 fixed header)
	udpHdr []byte
	pkt    []byte // the UDP payload: BTH through ICRC
	ip     IPInfo // what the ICRC needs, taken from the real headers
	ttl    uint8
}

// readCapture returns every UDP packet to or from port 4791 in a capture.
func readCapture(tb testing.TB, path string) []capPacket {
	tb.Helper()
	ds, err := pcapfile.RoCEv2(path)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]capPacket, len(ds))
	for i, d := range ds {
		out[i] = capPacket{
			frame: d.Frame, ipHdr: d.IP.Header, udpHdr: d.Header, pkt: d.Payload, ttl: d.IP.TTL,
			ip: IPInfo{Src: d.IP.Src, Dst: d.IP.Dst, SrcPort: d.SrcPort, DstPort: d.DstPort, ID: d.IP.ID, DF: d.IP.DF},
		}
	}
	return out
}

// captureFiles returns the capture files, failing if there are none.
func captureFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(captureDir, "*.pcap"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatalf("no captures in %s", captureDir)
	}
	sort.Strings(files)
	return files
}

// reencode builds a packet from scratch out of p's parsed fields: every
// header through its Fields and Encode, then the payload, zero pad, and an
// ICRC computed for ip. It is what an engine sending the same packet does.
func reencode(p *Packet, ip *IPInfo) []byte {
	info := p.Info
	pad := PadFor(len(p.Payload))
	b := make([]byte, PacketLen(p.BTH.Opcode(), len(p.Payload)))
	f := p.BTH.Fields()
	BTH(b).Encode(&f)
	if o := info.RETHOff; o != 0 {
		f := p.RETH.Fields()
		RETH(b[o:]).Encode(&f)
	}
	if o := info.AETHOff; o != 0 {
		f := p.AETH.Fields()
		AETH(b[o:]).Encode(&f)
	}
	if o := info.AtomicETHOff; o != 0 {
		f := p.AtomicETH.Fields()
		AtomicETH(b[o:]).Encode(&f)
	}
	if o := info.AtomicAckETHOff; o != 0 {
		AtomicAckETH(b[o:]).SetOrigData(p.AtomicAckETH.OrigData())
	}
	if o := info.ImmOff; o != 0 {
		ImmDt(b[o:]).SetImm(p.ImmDt.Imm())
	}
	if o := info.IETHOff; o != 0 {
		IETH(b[o:]).SetRKey(p.IETH.RKey())
	}
	if o := info.DETHOff; o != 0 {
		f := p.DETH.Fields()
		DETH(b[o:]).Encode(&f)
	}
	n := copy(b[info.Length:], p.Payload)
	_ = pad // the pad bytes stay zero
	if ip != nil {
		PutICRC(b[:info.Length+n+pad+ICRCLen], ip)
	}
	return b
}

// wantOpcodes is the number of packets of each opcode in each capture, as
// `tshark -Y udp.port==4791 -T fields -e infiniband.bth.opcode` counts them.
var wantOpcodes = map[string]map[Opcode]int{
	"atomic_lat.pcap":  {RCFetchAdd: 20, RCAtomicAck: 20},
	"rc_pingpong.pcap": {RCSendFirst: 20, RCSendMiddle: 40, RCSendLast: 20, RCAck: 20},
	"read_bw.pcap":     {RCReadRequest: 20, RCReadResponseFirst: 20, RCReadResponseMiddle: 40, RCReadResponseLast: 20},
	"send_bw.pcap":     {RCSendFirst: 20, RCSendMiddle: 40, RCSendLast: 20, RCAck: 20},
	"ud_pingpong.pcap": {UDSendOnly: 20},
	"write_bw.pcap":    {RCWriteFirst: 20, RCWriteMiddle: 40, RCWriteLast: 20, RCAck: 20},
	"write_bw_mtu4096.pcap": {
		RCWriteFirst: 20, RCWriteMiddle: 40, RCWriteLast: 20, RCAck: 20,
	},
}

// TestCaptures parses every RoCEv2 packet rxe sent, checks its ICRC both
// from the real headers and from IPInfo, and rebuilds it byte for byte.
func TestCaptures(t *testing.T) {
	for _, path := range captureFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			pkts := readCapture(t, path)
			if len(pkts) == 0 {
				t.Fatal("no RoCEv2 packets")
			}
			counts := map[Opcode]int{}
			for _, cp := range pkts {
				var p Packet
				if err := Parse(cp.pkt, &p); err != nil {
					t.Errorf("frame %d: Parse: %v", cp.frame, err)
					continue
				}
				op := p.BTH.Opcode()
				counts[op]++
				if !p.Info.Valid() || p.Info != op.Info() {
					t.Errorf("frame %d: opcode %v: bad Info", cp.frame, op)
				}
				body := cp.pkt[:len(cp.pkt)-ICRCLen]
				if got := ICRCFromHeaders(cp.ipHdr, cp.udpHdr, body); got != p.ICRC {
					t.Errorf("frame %d %v: ICRCFromHeaders = %#08x, packet has %#08x", cp.frame, op, got, p.ICRC)
				}
				if got := ICRC(&cp.ip, body); got != p.ICRC {
					t.Errorf("frame %d %v: ICRC = %#08x, packet has %#08x", cp.frame, op, got, p.ICRC)
				}
				if !CheckICRC(cp.pkt, &cp.ip) {
					t.Errorf("frame %d %v: CheckICRC false", cp.frame, op)
				}
				if got := reencode(&p, &cp.ip); string(got) != string(cp.pkt) {
					t.Errorf("frame %d %v: re-encoded packet differs\n got %x\nwant %x", cp.frame, op, got, cp.pkt)
				}
			}
			want, ok := wantOpcodes[name]
			if !ok {
				t.Fatalf("no expected opcode counts for %s: got %v", name, counts)
			}
			if len(counts) != len(want) {
				t.Errorf("opcodes seen %v, want %v", counts, want)
			}
			for op, n := range want {
				if counts[op] != n {
					t.Errorf("%v: %d packets, want %d", op, counts[op], n)
				}
			}
			t.Logf("%d RoCEv2 packets checked", len(pkts))
		})
	}
}

// requesterState follows one requester's packets and its responder's
// answers in a capture.
type requesterState struct {
	nextPSN PSN   // PSN of the next request
	started bool  // nextPSN is known
	ackReq  []PSN // PSNs of requests with AckReq not yet acknowledged
	reads   []readWindow
	msn     uint32
}

// readWindow is an outstanding READ: its request PSN, the next response
// PSN expected, and the end of the PSNs it reserved.
type readWindow struct{ start, next, end PSN }

// TestCaptureFacts checks what DESIGN.md says about rxe's traffic against
// the captures, and what an engine must reproduce to look like rxe.
func TestCaptureFacts(t *testing.T) {
	for _, path := range captureFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			pkts := readCapture(t, path)
			mtu := 1024
			if name == "write_bw_mtu4096.pcap" {
				mtu = 4096
			}
			qpAt := map[netip.Addr]uint32{} // the QP each host's packets are sent to
			lastID := map[netip.Addr]uint16{}
			idGaps := 0
			reqs := map[netip.Addr]*requesterState{} // by requester address
			state := func(a netip.Addr) *requesterState {
				if reqs[a] == nil {
					reqs[a] = &requesterState{}
				}
				return reqs[a]
			}
			for _, cp := range pkts {
				var p Packet
				if err := Parse(cp.pkt, &p); err != nil {
					t.Fatalf("frame %d: %v", cp.frame, err)
				}
				op, info := p.BTH.Opcode(), p.Info
				where := fmt.Sprintf("frame %d %v", cp.frame, op)
				udpCsum := binary.BigEndian.Uint16(cp.udpHdr[6:])
				if !cp.ip.Src.Is4() || !cp.ip.DF || udpCsum != 0 || cp.ip.DstPort != UDPPort {
					t.Errorf("%s: want IPv4, DF, UDP checksum 0, port %d: got %v DF=%v csum=%#x dport=%d", where, UDPPort, cp.ip.Src, cp.ip.DF, udpCsum, cp.ip.DstPort)
				}
				if cp.ip.ID == 0 {
					t.Errorf("%s: IPv4 ID 0; rxe sends non-zero IDs", where)
				}
				if prev, ok := lastID[cp.ip.Src]; ok && cp.ip.ID != prev+1 {
					idGaps++
				}
				lastID[cp.ip.Src] = cp.ip.ID
				if p.BTH[4] != 0 || p.BTH[8]&0x7F != 0 || p.BTH.PKey() != 0xFFFF || p.BTH.PadCount() != 0 || p.BTH.SolicitedEvent() || p.BTH.MigReq() {
					t.Errorf("%s: unexpected BTH %x", where, []byte(p.BTH))
				}
				if info.Has(FlagAETH) && p.AETH.Syndrome() != ACKSyndrome(ACKCreditInvalid) {
					t.Errorf("%s: syndrome %#x, want ACK with credit 0x1F", where, p.AETH.Syndrome())
				}
				if info.Has(FlagPayload) && !info.Has(FlagLast) && len(p.Payload) != mtu {
					t.Errorf("%s: payload %d bytes, want one MTU (%d)", where, len(p.Payload), mtu)
				}
				qpAt[cp.ip.Dst] = p.BTH.DestQP()
				if info.Service == ServiceUD {
					if got, want := cp.ip.SrcPort, UDSourcePort(p.DETH.SrcQP()); got != want {
						t.Errorf("%s: UD source port %d, want UDSourcePort(%#x) = %d", where, got, p.DETH.SrcQP(), want)
					}
					continue
				}
				// AckReq on the last packet of every RC request, never elsewhere.
				if want := info.Has(FlagRequest | FlagLast); p.BTH.AckReq() != want {
					t.Errorf("%s: AckReq %v, want %v", where, p.BTH.AckReq(), want)
				}
				psn := p.BTH.PSN()
				if info.Has(FlagRequest) {
					r := state(cp.ip.Src)
					if r.started && psn != r.nextPSN {
						t.Errorf("%s: request PSN %v, want %v", where, psn, r.nextPSN)
					}
					r.started, r.nextPSN = true, psn.Add(1)
					if op == RCReadRequest {
						// The requester reserves one PSN per response packet.
						n := (p.RETH.DMALen() + uint32(mtu) - 1) / uint32(mtu)
						r.reads = append(r.reads, readWindow{psn, psn, psn.Add(n)})
						r.nextPSN = psn.Add(n)
					}
					if p.BTH.AckReq() {
						r.ackReq = append(r.ackReq, psn)
					}
					continue
				}
				r := state(cp.ip.Dst)
				acked := psn
				if info.Has(FlagRead) {
					// READ responses use the PSNs their request reserved, in order.
					if len(r.reads) == 0 || psn != r.reads[0].next {
						t.Errorf("%s: PSN %v, outstanding reads %v", where, psn, r.reads)
						continue
					}
					w := &r.reads[0]
					w.next = psn.Add(1)
					if info.Has(FlagLast) {
						if w.next != w.end {
							t.Errorf("%s: READ ends at %v before its reserved end %v", where, w.next, w.end)
						}
						acked = w.start // the READ request's PSN
						r.reads = r.reads[1:]
					}
				}
				if info.Has(FlagAETH | FlagLast) {
					// Each ACK (and each last READ response) acknowledges one
					// AckReq PSN, in order, and counts one message.
					r.msn++
					if p.AETH.MSN() != r.msn {
						t.Errorf("%s: MSN %d, want %d", where, p.AETH.MSN(), r.msn)
					}
					if len(r.ackReq) == 0 || acked != r.ackReq[0] {
						t.Errorf("%s: PSN %v acknowledges no outstanding AckReq (%v)", where, psn, r.ackReq)
					} else {
						r.ackReq = r.ackReq[1:]
					}
				}
			}
			for a, r := range reqs {
				if len(r.ackReq) != 0 || len(r.reads) != 0 {
					t.Errorf("requester %v: AckReq PSNs %v and reads %v never answered", a, r.ackReq, r.reads)
				}
			}
			t.Logf("IPv4 IDs: %d gaps in per-source sequences of %d packets", idGaps, len(pkts))
			if strings.HasPrefix(name, "ud_") {
				return
			}
			if len(qpAt) != 2 {
				t.Fatalf("want two hosts, got %v", qpAt)
			}
			var q []uint32
			for _, qpn := range qpAt {
				q = append(q, qpn)
			}
			want := SourcePort(q[0], q[1])
			if want != SourcePort(q[1], q[0]) {
				t.Errorf("SourcePort is not symmetric for %#x, %#x", q[0], q[1])
			}
			for _, cp := range pkts {
				if cp.ip.SrcPort != want {
					t.Errorf("frame %d: source port %d, want SourcePort(%#x, %#x) = %d", cp.frame, cp.ip.SrcPort, q[0], q[1], want)
				}
			}
		})
	}
}
