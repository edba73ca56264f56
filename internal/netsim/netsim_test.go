package netsim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/transport"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
	addr6 = netip.MustParseAddr("fd00::1")
	addr7 = netip.MustParseAddr("fd00::2")
)

const (
	opSendOnly byte = 0x04 // RC SEND Only
	opACK      byte = 0x11 // RC Acknowledge
)

// testPacket builds a size-byte packet that looks enough like RoCEv2:
// opcode, seq in the PSN field, a pattern, and four zero ICRC bytes.
func testPacket(seq, size int, opcode byte) []byte {
	b := make([]byte, size)
	b[0] = opcode
	b[4] = byte(seq) // BTH byte 4 is masked from the ICRC; vary it anyway
	binary.BigEndian.PutUint32(b[8:], uint32(seq))
	for i := 12; i < size-icrcLen; i++ {
		b[i] = byte(seq*7 + i)
	}
	return b
}

func seqOf(b []byte) int { return int(binary.BigEndian.Uint32(b[8:])) }

// wireBytes is pkt as the network should deliver it: with its ICRC.
func wireBytes(pkt []byte, src, dst netip.Addr, flow uint32) []byte {
	b := bytes.Clone(pkt)
	binary.LittleEndian.PutUint32(b[len(b)-4:], refICRC(b, src, dst, 0xC000|uint16(flow&0x3FFF)))
	return b
}

// refICRC computes the ICRC the slow, obvious way: build the masked
// pseudo-packet and checksum it.
func refICRC(pkt []byte, src, dst netip.Addr, sport uint16) uint32 {
	b := bytes.Repeat([]byte{0xFF}, 8)
	udpLen := 8 + len(pkt)
	if src.Is4() {
		b = append(b, 0x45, 0xFF)
		b = binary.BigEndian.AppendUint16(b, uint16(20+udpLen))
		b = append(b, 0, 0, 0x40, 0, 0xFF, 17, 0xFF, 0xFF)
	} else {
		b = append(b, 0x6F, 0xFF, 0xFF, 0xFF)
		b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
		b = append(b, 17, 0xFF)
	}
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, 4791)
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0xFF, 0xFF)
	body := bytes.Clone(pkt[:len(pkt)-4])
	if len(body) > 4 {
		body[4] = 0xFF
	}
	return crc32.ChecksumIEEE(append(b, body...))
}

type arrival struct {
	at    time.Duration // since the test's start
	buf   []byte
	peer  netip.AddrPort
	local netip.Addr
	icrc  transport.ICRCStatus
}

// receive collects everything e receives, in order, with arrival times.
// The returned function closes e and returns the arrivals.
func receive(e *Endpoint, start time.Time) func() []arrival {
	var out []arrival
	done := make(chan struct{})
	go func() {
		defer close(done)
		pkts := make([]transport.Datagram, e.BatchSize())
		for i := range pkts {
			pkts[i].Buf = make([]byte, 0, 9000)
		}
		for {
			n, err := e.Recv(pkts)
			if err != nil {
				return
			}
			now := time.Since(start)
			for _, p := range pkts[:n] {
				out = append(out, arrival{now, bytes.Clone(p.Buf), p.Peer, p.Local, p.ICRC})
			}
		}
	}()
	return func() []arrival {
		e.Close()
		<-done
		return out
	}
}

func mustEndpoint(t *testing.T, n *Network, addr netip.Addr) *Endpoint {
	t.Helper()
	e, err := n.Endpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustSend(t *testing.T, e *Endpoint, to netip.Addr, flow uint32, bufs ...[]byte) {
	t.Helper()
	pkts := make([]transport.Datagram, len(bufs))
	for i, b := range bufs {
		pkts[i] = transport.Datagram{Buf: b, Peer: netip.AddrPortFrom(to, transport.Port), Flow: flow}
	}
	n, err := e.Send(pkts)
	if err != nil || n != len(pkts) {
		t.Fatalf("Send = %d, %v; want %d, nil", n, err, len(pkts))
	}
}

// checkConservation checks that every packet is accounted for once.
func checkConservation(t *testing.T, s Stats) {
	t.Helper()
	out := s.Delivered + s.Dropped + s.QueueDrops + s.TooBig + s.NoRoute + s.Filtered + s.SwitchDrops
	if s.Sent+s.Duplicated != out {
		t.Errorf("Sent+Duplicated = %d, but %d accounted for: %+v", s.Sent+s.Duplicated, out, s)
	}
}

// checkBinomial fails unless k is within 5 standard deviations of the mean
// of Binomial(n, p).
func checkBinomial(t *testing.T, what string, k, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	tol := 5 * math.Sqrt(mean*(1-p))
	if math.Abs(float64(k)-mean) > tol {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f", what, k, n, mean, tol)
	}
}

func seedName(seed uint64) string { return fmt.Sprintf("seed=%d", seed) }

var seeds = []uint64{1, 2, 3}

func TestLossless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Seed: 1})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		start := time.Now()
		wait := receive(b, start)
		const flow = 0x12345
		var sent [][]byte
		for i := range 300 {
			sent = append(sent, testPacket(i, 16+i*4, opSendOnly))
		}
		for batch := range slices.Chunk(sent, 37) {
			mustSend(t, a, addrB, flow, batch...)
		}
		// Send must not retain or modify the caller's buffers.
		for i, p := range sent {
			if !bytes.Equal(p, testPacket(i, len(p), opSendOnly)) {
				t.Fatalf("Send modified packet %d", i)
			}
			clear(p)
		}
		time.Sleep(time.Millisecond)
		got := wait()
		if len(got) != len(sent) {
			t.Fatalf("received %d packets, want %d", len(got), len(sent))
		}
		for i, g := range got {
			want := wireBytes(testPacket(i, 16+i*4, opSendOnly), addrA, addrB, flow)
			if !bytes.Equal(g.buf, want) {
				t.Fatalf("packet %d: got %x, want %x", i, g.buf, want)
			}
			if g.icrc != transport.ICRCOK {
				t.Errorf("packet %d: ICRC %v", i, g.icrc)
			}
			if wantPeer := netip.AddrPortFrom(addrA, 0xC000|0x2345&0x3FFF); g.peer != wantPeer || g.local != addrB {
				t.Errorf("packet %d: peer %v local %v, want %v %v", i, g.peer, g.local, wantPeer, addrB)
			}
			if g.at != 0 {
				t.Errorf("packet %d arrived after %v, want 0 with no delay", i, g.at)
			}
		}
		s := n.Stats()
		if s.Sent != 300 || s.Delivered != 300 {
			t.Errorf("stats %+v", s)
		}
		checkConservation(t, s)
	})
}

func TestIPv6(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		defer n.Close()
		a, b := mustEndpoint(t, n, addr6), mustEndpoint(t, n, addr7)
		wait := receive(b, time.Now())
		mustSend(t, a, addr7, 9, testPacket(1, 1452, opSendOnly), testPacket(2, 1453, opSendOnly))
		time.Sleep(time.Millisecond)
		got := wait()
		if len(got) != 1 || got[0].icrc != transport.ICRCOK || !bytes.Equal(got[0].buf, wireBytes(testPacket(1, 1452, opSendOnly), addr6, addr7, 9)) {
			t.Fatalf("got %+v", got)
		}
		if s := n.Stats(); s.TooBig != 1 {
			t.Errorf("TooBig = %d, want 1 (1453 > 1500-48)", s.TooBig)
		}
	})
}

func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 7 * time.Microsecond
		n := New(Config{Delay: delay})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		start := time.Now()
		wait := receive(b, start)
		mustSend(t, a, addrB, 1, testPacket(0, 64, opSendOnly))
		time.Sleep(100 * time.Microsecond)
		mustSend(t, a, addrB, 1, testPacket(1, 64, opSendOnly), testPacket(2, 64, opSendOnly))
		time.Sleep(time.Millisecond)
		got := wait()
		want := []time.Duration{delay, 100*time.Microsecond + delay, 100*time.Microsecond + delay}
		if len(got) != len(want) {
			t.Fatalf("received %d, want %d", len(got), len(want))
		}
		for i, g := range got {
			if g.at != want[i] || seqOf(g.buf) != i {
				t.Errorf("packet %d (seq %d) arrived at %v, want %v", i, seqOf(g.buf), g.at, want[i])
			}
		}
	})
}

// TestJitter: every packet takes Delay plus at most Jitter, order is kept,
// and the delays actually vary.
func TestJitter(t *testing.T) {
	for _, seed := range seeds {
		t.Run(seedName(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const delay, jitter = 10 * time.Microsecond, 5 * time.Microsecond
				n := New(Config{Delay: delay, Jitter: jitter, Seed: seed})
				defer n.Close()
				a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
				start := time.Now()
				wait := receive(b, start)
				const count = 1000
				for i := range count {
					mustSend(t, a, addrB, 1, testPacket(i, 64, opSendOnly))
					time.Sleep(time.Microsecond)
				}
				time.Sleep(time.Millisecond)
				got := wait()
				if len(got) != count {
					t.Fatalf("received %d, want %d", len(got), count)
				}
				lat := map[time.Duration]bool{}
				for i, g := range got {
					if seqOf(g.buf) != i {
						t.Fatalf("arrival %d is seq %d: jitter reordered", i, seqOf(g.buf))
					}
					l := g.at - time.Duration(i)*time.Microsecond
					if l < delay || l >= delay+jitter {
						t.Errorf("seq %d took %v, want [%v, %v)", i, l, delay, delay+jitter)
					}
					lat[l] = true
				}
				if len(lat) < 100 {
					t.Errorf("only %d distinct latencies", len(lat))
				}
			})
		})
	}
}

// lossRun sends count packets over a network with cfg and returns the
// sequence numbers received and the stats.
func lossRun(t *testing.T, cfg Config, count int) (received []int, s Stats) {
	synctest.Test(t, func(t *testing.T) {
		n := New(cfg)
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		wait := receive(b, time.Now())
		for i := 0; i < count; i += 50 {
			batch := make([][]byte, 0, 50)
			for j := i; j < min(i+50, count); j++ {
				batch = append(batch, testPacket(j, 64, opSendOnly))
			}
			mustSend(t, a, addrB, 1, batch...)
			time.Sleep(time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		for _, g := range wait() {
			received = append(received, seqOf(g.buf))
		}
		s = n.Stats()
	})
	return received, s
}

func TestLoss(t *testing.T) {
	const count, loss = 10000, 0.1
	var first []int
	for _, seed := range seeds {
		t.Run(seedName(seed), func(t *testing.T) {
			got, s := lossRun(t, Config{Loss: loss, Seed: seed}, count)
			lost := count - len(got)
			checkBinomial(t, "lost", lost, count, loss)
			if s.Dropped != uint64(lost) || s.Delivered != uint64(len(got)) {
				t.Errorf("lost %d, received %d; stats %+v", lost, len(got), s)
			}
			checkConservation(t, s)
			if !slices.IsSorted(got) {
				t.Error("loss reordered packets")
			}
			again, _ := lossRun(t, Config{Loss: loss, Seed: seed}, count)
			if !slices.Equal(got, again) {
				t.Error("same seed, different packets lost")
			}
			// Decisions depend on the seed and the send order only: other
			// knobs do not change which packets are lost.
			other, _ := lossRun(t, Config{Loss: loss, Seed: seed, Jitter: 3 * time.Microsecond, Duplicate: 0.3, Reorder: 0.3, ReorderDelay: 2 * time.Microsecond}, count)
			slices.Sort(other)
			if other = slices.Compact(other); !slices.Equal(got, other) {
				t.Error("Jitter, Duplicate and Reorder changed which packets were lost")
			}
			if first == nil {
				first = got
			} else if slices.Equal(first, got) {
				t.Error("different seeds lost the same packets")
			}
		})
	}
}

func TestDuplicate(t *testing.T) {
	const count, dup = 4000, 0.2
	for _, seed := range seeds {
		t.Run(seedName(seed), func(t *testing.T) {
			got, s := lossRun(t, Config{Duplicate: dup, Seed: seed}, count)
			twice := 0
			seen := make([]int, count)
			for i, q := range got {
				seen[q]++
				if seen[q] == 2 {
					twice++
					if i == 0 || got[i-1] != q {
						t.Errorf("duplicate of %d does not follow it", q)
					}
				}
			}
			for q, k := range seen {
				if k != 1 && k != 2 {
					t.Fatalf("seq %d received %d times", q, k)
				}
			}
			checkBinomial(t, "duplicated", twice, count, dup)
			if s.Duplicated != uint64(twice) || len(got) != count+twice {
				t.Errorf("%d received twice, %d in all; stats %+v", twice, len(got), s)
			}
			checkConservation(t, s)
		})
	}
}

// TestReorder: with every packet sent at once, the in-order ones arrive
// after Delay in send order and the held-back ones after Delay+ReorderDelay,
// also in send order.
func TestReorder(t *testing.T) {
	const count, reorder = 1000, 0.1
	const delay, hold = 10 * time.Microsecond, 5 * time.Microsecond
	for _, seed := range seeds {
		t.Run(seedName(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := New(Config{Delay: delay, Reorder: reorder, ReorderDelay: hold, Seed: seed})
				defer n.Close()
				a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
				wait := receive(b, time.Now())
				var sent [][]byte
				for i := range count {
					sent = append(sent, testPacket(i, 64, opSendOnly))
				}
				mustSend(t, a, addrB, 1, sent...)
				time.Sleep(time.Millisecond)
				got := wait()
				if len(got) != count {
					t.Fatalf("received %d, want %d", len(got), count)
				}
				var early, late []int
				for _, g := range got {
					switch g.at {
					case delay:
						early = append(early, seqOf(g.buf))
					case delay + hold:
						late = append(late, seqOf(g.buf))
					default:
						t.Fatalf("seq %d arrived at %v", seqOf(g.buf), g.at)
					}
				}
				if !slices.IsSorted(early) || !slices.IsSorted(late) {
					t.Error("packets within one delivery time are out of send order")
				}
				if len(late) == 0 || late[0] > early[len(early)-1] {
					t.Error("no packet was overtaken")
				}
				s := n.Stats()
				if s.Reordered != uint64(len(late)) {
					t.Errorf("%d held back, Stats.Reordered = %d", len(late), s.Reordered)
				}
				checkBinomial(t, "reordered", len(late), count, reorder)
			})
		})
	}
}

// TestCorrupt: the receiver sees ICRCBad for exactly the packets the
// network changed, each changed in one byte, and ICRCOK with exact bytes
// for the rest.
func TestCorrupt(t *testing.T) {
	const count, corrupt = 3000, 0.1
	for _, seed := range seeds {
		t.Run(seedName(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := New(Config{Corrupt: corrupt, Seed: seed})
				defer n.Close()
				a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
				wait := receive(b, time.Now())
				size := func(i int) int { return 5 + i%200 } // includes the shortest packets
				for i := range count {
					p := testPacket(i, max(size(i), 12), opSendOnly)[:size(i)]
					mustSend(t, a, addrB, uint32(i), p)
				}
				time.Sleep(time.Millisecond)
				got := wait()
				if len(got) != count {
					t.Fatalf("received %d, want %d", len(got), count)
				}
				bad := 0
				for i, g := range got {
					p := testPacket(i, max(size(i), 12), opSendOnly)[:size(i)]
					if size(i) < 12 {
						clear(p[len(p)-4:])
					}
					want := wireBytes(p, addrA, addrB, uint32(i))
					diff := 0
					for j := range want {
						if want[j] != g.buf[j] {
							diff++
							if j == 4 {
								t.Errorf("packet %d: masked byte 4 corrupted", i)
							}
						}
					}
					switch {
					case g.icrc == transport.ICRCOK && diff == 0:
					case g.icrc == transport.ICRCBad && diff == 1:
						bad++
					default:
						t.Errorf("packet %d: ICRC %v with %d bytes changed", i, g.icrc, diff)
					}
				}
				s := n.Stats()
				if s.Corrupted != uint64(bad) {
					t.Errorf("%d ICRCBad, Stats.Corrupted = %d", bad, s.Corrupted)
				}
				checkBinomial(t, "corrupted", bad, count, corrupt)
			})
		})
	}
}

func TestQueueLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{QueueLimit: 10, Delay: time.Microsecond})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		var sent [][]byte
		for i := range 25 {
			sent = append(sent, testPacket(i, 100, opSendOnly))
		}
		mustSend(t, a, addrB, 1, sent...)
		time.Sleep(time.Millisecond) // nobody receives meanwhile
		s := n.Stats()
		if s.Delivered != 10 || s.QueueDrops != 15 {
			t.Fatalf("stats %+v, want 10 delivered and 15 queue drops", s)
		}
		pkts := make([]transport.Datagram, 64)
		for i := range pkts {
			pkts[i].Buf = make([]byte, 0, 2048)
		}
		k, err := b.Recv(pkts)
		if err != nil || k != 10 {
			t.Fatalf("Recv = %d, %v; want 10", k, err)
		}
		for i := range k {
			if seqOf(pkts[i].Buf) != i {
				t.Errorf("queued packet %d is seq %d, want the first ones (tail drop)", i, seqOf(pkts[i].Buf))
			}
		}
		// The queue has room again.
		mustSend(t, a, addrB, 1, testPacket(99, 100, opSendOnly))
		if k, err := b.Recv(pkts); err != nil || k != 1 || seqOf(pkts[0].Buf) != 99 {
			t.Fatalf("Recv after drain = %d, %v", k, err)
		}
		checkConservation(t, n.Stats())
	})
}

func TestTruncation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		mustSend(t, a, addrB, 1, testPacket(0, 200, opSendOnly), testPacket(1, 100, opSendOnly))
		pkts := []transport.Datagram{{Buf: make([]byte, 0, 150)}, {Buf: make([]byte, 0, 150)}}
		k, err := b.Recv(pkts)
		if err != nil || k != 2 {
			t.Fatalf("Recv = %d, %v", k, err)
		}
		if len(pkts[0].Buf) != 150 || pkts[0].ICRC != transport.ICRCBad {
			t.Errorf("truncated packet: %d bytes, ICRC %v; want 150, bad", len(pkts[0].Buf), pkts[0].ICRC)
		}
		if len(pkts[1].Buf) != 100 || pkts[1].ICRC != transport.ICRCOK {
			t.Errorf("whole packet: %d bytes, ICRC %v; want 100, ok", len(pkts[1].Buf), pkts[1].ICRC)
		}
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		errs := make(chan error, 2)
		for _, e := range []*Endpoint{a, b} {
			go func() {
				_, err := e.Recv(make([]transport.Datagram, 1))
				errs <- err
			}()
		}
		synctest.Wait()
		select {
		case err := <-errs:
			t.Fatalf("Recv returned %v before Close", err)
		default:
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errs; !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Recv after Endpoint.Close: %v", err)
		}
		if _, err := a.Send([]transport.Datagram{{Buf: testPacket(0, 64, opSendOnly)}}); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send on a closed endpoint: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		// A closed endpoint's address is free again.
		a2 := mustEndpoint(t, n, addrA)
		n.Close()
		if err := <-errs; !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Recv after Network.Close: %v", err)
		}
		if _, err := a2.Recv(make([]transport.Datagram, 1)); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Recv on a closed network: %v", err)
		}
		if _, err := n.Endpoint(addrB); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Endpoint on a closed network: %v", err)
		}
		n.Close()
	})
}

// TestCloseInFlight: packets in flight to an endpoint that closes are
// counted as NoRoute; Network.Close stops the delivery timer.
func TestCloseInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Delay: time.Millisecond})
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		mustSend(t, a, addrB, 1, testPacket(0, 64, opSendOnly), testPacket(1, 64, opSendOnly))
		b.Close()
		time.Sleep(2 * time.Millisecond)
		if s := n.Stats(); s.NoRoute != 2 {
			t.Errorf("stats %+v, want 2 NoRoute", s)
		}
		mustSend(t, a, addrA, 1, testPacket(2, 64, opSendOnly))
		n.Close() // with a packet in flight: the bubble must still end
	})
}

func TestRouting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		defer n.Close()
		a := mustEndpoint(t, n, addrA)
		b := mustEndpoint(t, n, netip.MustParseAddr("::ffff:10.0.0.2")) // mapped: taken as IPv4
		six := mustEndpoint(t, n, addr6)
		if _, err := n.Endpoint(addrA); !errors.Is(err, ErrAddrInUse) {
			t.Errorf("second endpoint at %v: %v", addrA, err)
		}
		if got, want := b.LocalAddr(), netip.MustParseAddrPort("10.0.0.2:4791"); got != want {
			t.Errorf("LocalAddr = %v, want %v", got, want)
		}
		if a.LinkMTU() != 1500 || a.BatchSize() != 64 {
			t.Errorf("LinkMTU %d, BatchSize %d", a.LinkMTU(), a.BatchSize())
		}
		p := testPacket(0, 64, opSendOnly)
		pkts := []transport.Datagram{
			{Buf: p, Peer: netip.MustParseAddrPort("10.0.0.9:4791")}, // nobody there
			{Buf: p, Peer: netip.MustParseAddrPort("10.0.0.2:4792")}, // wrong port
			{Buf: p, Peer: netip.AddrPortFrom(addr6, 4791)},          // other family
			{Buf: testPacket(1, 1473, opSendOnly), Peer: netip.MustParseAddrPort("10.0.0.2:4791")},
			{Buf: testPacket(2, 1472, opSendOnly), Peer: netip.MustParseAddrPort("[::ffff:10.0.0.2]:4791")},
		}
		if k, err := a.Send(pkts); k != len(pkts) || err != nil {
			t.Fatalf("Send = %d, %v", k, err)
		}
		if k, err := a.Send([]transport.Datagram{{Buf: p}, {Buf: make([]byte, 3)}, {Buf: p}}); k != 1 || err == nil {
			t.Errorf("Send with a 3-byte packet = %d, %v; want 1 and an error", k, err)
		}
		time.Sleep(time.Millisecond)
		s := n.Stats()
		if s.NoRoute != 4 || s.TooBig != 1 || s.Delivered != 1 {
			t.Errorf("stats %+v, want 4 NoRoute, 1 TooBig, 1 Delivered", s)
		}
		checkConservation(t, s)
		n.SetConfig(Config{MTU: 9000})
		if six.LinkMTU() != 9000 {
			t.Errorf("LinkMTU after SetConfig = %d", six.LinkMTU())
		}
	})
}

// TestFilter drops the third ACK and nothing else.
func TestFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Delay: time.Microsecond})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		wait := receive(b, time.Now())
		acks := 0
		n.SetFilter(func(p *transport.Datagram, from, to netip.Addr) Verdict {
			if from != addrA || to != addrB || p.Peer != b.LocalAddr() || p.Local != addrA {
				t.Errorf("filter got %v→%v, peer %v, local %v", from, to, p.Peer, p.Local)
			}
			if !checkICRC(p.Buf, from, to, flowPort(p.Flow)) {
				t.Error("filter saw a packet without its ICRC")
			}
			if p.Buf[0] == opACK {
				acks++
				if acks == 3 {
					return Drop
				}
			}
			return Pass
		})
		var sent [][]byte
		for i := range 20 {
			op := opSendOnly
			if i%2 == 1 {
				op = opACK
			}
			sent = append(sent, testPacket(i, 64, op))
		}
		mustSend(t, a, addrB, 1, sent[:10]...)
		time.Sleep(time.Millisecond)
		n.SetFilter(nil)
		mustSend(t, a, addrB, 1, sent[10:]...)
		time.Sleep(time.Millisecond)
		var got []int
		for _, g := range wait() {
			got = append(got, seqOf(g.buf))
		}
		want := slices.Collect(func(yield func(int) bool) {
			for i := range 20 {
				if i != 5 && !yield(i) { // seq 5 is the third ACK
					return
				}
			}
		})
		if !slices.Equal(got, want) {
			t.Errorf("received %v, want %v", got, want)
		}
		if s := n.Stats(); s.Filtered != 1 {
			t.Errorf("Filtered = %d, want 1", s.Filtered)
		}
	})
}

func TestBandwidth(t *testing.T) {
	tests := []struct {
		name      string
		bandwidth int64
		size      int
		count     int
		delay     time.Duration
		want      func(i int) time.Duration // arrival of packet i
	}{
		{"1MB/s", 1_000_000, 1000, 10, 5 * time.Microsecond, func(i int) time.Duration {
			return time.Duration(i+1)*time.Millisecond + 5*time.Microsecond
		}},
		// 1000 bytes at 3000 B/s is 333333333⅓ ns: the remainder carries,
		// so three packets take exactly one second.
		{"3kB/s", 3000, 1000, 3, 0, func(i int) time.Duration {
			return []time.Duration{333333333, 666666666, time.Second}[i]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := New(Config{Bandwidth: tt.bandwidth, Delay: tt.delay})
				defer n.Close()
				a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
				wait := receive(b, time.Now())
				var sent [][]byte
				for i := range tt.count {
					sent = append(sent, testPacket(i, tt.size, opSendOnly))
				}
				mustSend(t, a, addrB, 1, sent...)
				time.Sleep(2 * time.Second)
				got := wait()
				if len(got) != tt.count {
					t.Fatalf("received %d, want %d", len(got), tt.count)
				}
				for i, g := range got {
					if g.at != tt.want(i) {
						t.Errorf("packet %d arrived at %v, want %v", i, g.at, tt.want(i))
					}
				}
			})
		})
	}
}

// TestSetConfig: a network that starts lossless can turn lossy.
func TestSetConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Seed: 1})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		wait := receive(b, time.Now())
		mustSend(t, a, addrB, 1, testPacket(0, 64, opSendOnly))
		time.Sleep(time.Microsecond)
		n.SetConfig(Config{Loss: 1})
		mustSend(t, a, addrB, 1, testPacket(1, 64, opSendOnly))
		time.Sleep(time.Microsecond)
		if got := wait(); len(got) != 1 || seqOf(got[0].buf) != 0 {
			t.Errorf("received %d packets, want only the first", len(got))
		}
		if s := n.Stats(); s.Dropped != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestConcurrentSenders runs several senders and receivers at once (run it
// with -race): every packet is accounted for, and each sender's packets
// arrive in the order it sent them.
func TestConcurrentSenders(t *testing.T) {
	for _, seed := range seeds {
		t.Run(seedName(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := New(Config{Loss: 0.05, Duplicate: 0.05, Delay: 3 * time.Microsecond, Jitter: 2 * time.Microsecond, Seed: seed})
				defer n.Close()
				const senders, perSender = 4, 500
				sink := mustEndpoint(t, n, netip.MustParseAddr("10.0.1.1"))
				start := time.Now()
				// Two receivers share the sink.
				waits := []func() []arrival{receive(sink, start), receive(sink, start)}
				var wg sync.WaitGroup
				for s := range senders {
					e := mustEndpoint(t, n, netip.AddrFrom4([4]byte{10, 0, 0, byte(s + 1)}))
					wg.Go(func() {
						pkts := make([]transport.Datagram, 10)
						for i := 0; i < perSender; i += len(pkts) {
							for j := range pkts {
								q := s*perSender + i + j
								pkts[j] = transport.Datagram{Buf: testPacket(q, 64+q%100, opSendOnly), Peer: sink.LocalAddr(), Flow: uint32(s)}
							}
							if k, err := e.Send(pkts); k != len(pkts) || err != nil {
								t.Errorf("sender %d: Send = %d, %v", s, k, err)
								return
							}
							time.Sleep(time.Microsecond)
						}
					})
				}
				wg.Wait()
				time.Sleep(time.Millisecond)
				total := 0
				for r, w := range waits {
					// Each receiver sees each sender's packets in send order
					// (a duplicate right after its original).
					last := make([]int, senders)
					for i := range last {
						last[i] = -1
					}
					got := w()
					total += len(got)
					for _, g := range got {
						q := seqOf(g.buf)
						s := q / perSender
						if g.peer != netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(s + 1)}), flowPort(uint32(s))) || g.icrc != transport.ICRCOK {
							t.Fatalf("seq %d from %v, ICRC %v", q, g.peer, g.icrc)
						}
						if q < last[s] {
							t.Errorf("receiver %d, sender %d: seq %d after %d", r, s, q, last[s])
						}
						last[s] = q
					}
				}
				st := n.Stats()
				if st.Sent != senders*perSender || st.Delivered != uint64(total) {
					t.Errorf("received %d; stats %+v", total, st)
				}
				checkConservation(t, st)
			})
		})
	}
}

func TestICRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		p := make([]byte, 4+r.IntN(300))
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		sport := uint16(r.Uint32())
		for _, addrs := range [][2]netip.Addr{{addrA, addrB}, {addr6, addr7}} {
			putICRC(p, addrs[0], addrs[1], sport)
			if got, want := binary.LittleEndian.Uint32(p[len(p)-4:]), refICRC(p, addrs[0], addrs[1], sport); got != want {
				t.Fatalf("packet %d (%d bytes), %v: icrc %#x, want %#x", i, len(p), addrs, got, want)
			}
		}
		putICRC(p, addrA, addrB, sport)
		if !checkICRC(p, addrA, addrB, sport) || checkICRC(p, addrB, addrA, sport) || checkICRC(p, addrA, addrB, sport+1) {
			t.Fatal("checkICRC does not cover addresses and ports")
		}
	}
	p := testPacket(1, 1024, opSendOnly)
	if allocs := testing.AllocsPerRun(100, func() { putICRC(p, addr6, addr7, 0xC001) }); allocs != 0 {
		t.Errorf("putICRC allocates %v times", allocs)
	}
}

// TestAllocs: a steady stream of Send and Recv batches reuses the packet
// copies.
func TestAllocs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Delay: time.Microsecond})
		defer n.Close()
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		out := make([]transport.Datagram, 64)
		in := make([]transport.Datagram, 64)
		for i := range out {
			out[i] = transport.Datagram{Buf: testPacket(i, 1024, opSendOnly), Peer: b.LocalAddr()}
			in[i].Buf = make([]byte, 0, 2048)
		}
		step := func() {
			if _, err := a.Send(out); err != nil {
				t.Fatal(err)
			}
			for got := 0; got < len(out); {
				k, err := b.Recv(in)
				if err != nil {
					t.Fatal(err)
				}
				got += k
			}
		}
		step()
		if allocs := testing.AllocsPerRun(50, step); allocs > 0 {
			t.Errorf("%v allocations per batch of 64, want 0", allocs)
		}
	})
}

func BenchmarkSendRecv(b *testing.B) {
	n := New(Config{})
	defer n.Close()
	x, _ := n.Endpoint(addrA)
	y, _ := n.Endpoint(addrB)
	out := make([]transport.Datagram, 64)
	in := make([]transport.Datagram, 64)
	for i := range out {
		out[i] = transport.Datagram{Buf: testPacket(i, 1024, opSendOnly), Peer: y.LocalAddr()}
		in[i].Buf = make([]byte, 0, 2048)
	}
	b.ReportAllocs()
	b.SetBytes(64 * 1024)
	for b.Loop() {
		x.Send(out)
		for got := 0; got < len(out); {
			k, _ := y.Recv(in)
			got += k
		}
	}
}
