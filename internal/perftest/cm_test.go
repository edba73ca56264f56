package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// chanMessenger is one end of an in-memory message pair: what it sends
// arrives whole at the other end. It records every message it sends.
type chanMessenger struct {
	in, out chan []byte
	sent    [][]byte
}

func chanPair() (*chanMessenger, *chanMessenger) {
	a, b := make(chan []byte, 4), make(chan []byte, 4)
	return &chanMessenger{in: a, out: b}, &chanMessenger{in: b, out: a}
}

func (m *chanMessenger) SendMsg(ctx context.Context, b []byte) error {
	m.sent = append(m.sent, bytes.Clone(b))
	select {
	case m.out <- bytes.Clone(b):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RecvMsg copies the first len(b) bytes of the message, zeros after a
// short one, as perftest's fixed receive buffer would leave them.
func (m *chanMessenger) RecvMsg(ctx context.Context, b []byte) error {
	select {
	case msg := <-m.in:
		clear(b)
		copy(b, msg)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// expandCM is expand for the rdma_cm exchange: X is ConnectQPs (two
// barriers with a zero key), keys are 56-byte structs, C is a barrier
// without "done".
func expandCM(plan string, numQPs int) []int {
	var sizes []int
	for _, c := range strings.ReplaceAll(plan, " ", "") {
		switch c {
		case 'V':
			sizes = append(sizes, 16)
		case 'S':
			sizes = append(sizes, 4)
		case 'M':
			sizes = append(sizes, 2)
		case 'X':
			sizes = append(sizes, DestBinarySize, DestBinarySize)
		case 'K':
			for range numQPs {
				sizes = append(sizes, DestBinarySize)
			}
		case 'B', 'C':
			sizes = append(sizes, DestBinarySize)
		case 'R':
			sizes = append(sizes, 8, 8, 8, 8, 8)
		case '|':
		default:
			panic("bad plan letter " + string(c))
		}
	}
	return sizes
}

// TestCMPlans drives both sides of every test over rdma_cm messages and
// checks each side's messages against the plan transcribed from perftest
// 4.5's *_bw.c/*_lat.c with -R: create_rdma_cm_connection's two barriers
// after the negotiation, binary keys, no "done".
func TestCMPlans(t *testing.T) {
	tests := []struct {
		verb   Verb
		kind   Kind
		duplex bool
		plan   string
	}{
		{Write, BW, false, "VSSM X K K B | B R C"},
		{Read, BW, false, "VSSM X K K B | B R C"},
		{Atomic, BW, true, "VSSM X K K B | B R | C"},
		{Send, BW, false, "VSSM X K B K | B | C"},
		{Send, BW, true, "VSSM X K B K | B R | C"},
		{Write, Lat, false, "VSSM X B K K B |"},
		{Read, Lat, false, "VSSM X B K K B | C"},
		{Send, Lat, false, "VSSM X K B K | B | C"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v_%v_duplex=%v", tt.verb, tt.kind, tt.duplex), func(t *testing.T) {
			mc, ms := chanPair()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mk := func(role Role, m Messenger, base uint32) (*Session, run) {
				sess, err := NewCMSession(m, Config{Role: role, Verb: tt.verb, Kind: tt.kind, NumQPs: 2, Duplex: tt.duplex})
				if err != nil {
					t.Fatal(err)
				}
				// One side IPv4-mapped, the other not: over rdma_cm
				// perftest does not compare GID types.
				gid := [16]byte{0: 0xfe, 1: 0x80, 15: byte(role) + 1}
				if role == Client {
					gid = [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}
				}
				keys := []Dest{
					{OutReads: 16, QPN: base + 1, PSN: base + 2, RKey: base + 3, VAddr: uint64(base) << 36, GID: gid},
					{OutReads: 16, QPN: base + 11, PSN: base + 12, RKey: base + 13, VAddr: uint64(base)<<36 + 4096, GID: gid},
				}
				rep := BWReport{Size: 65536, Iters: 2000, BWPeak: float64(base), BWAvg: float64(base) / 2, MsgRate: 0.25}
				return sess, run{sys: SysInfo{PageSize: 4096, CacheLineSize: 64, MTU: MTU1024}, keys: keys, report: rep}
			}
			cs, cin := mk(Client, mc, 0x100)
			ss, sin := mk(Server, ms, 0x200)
			connected := make(chan Role, 2)
			side := func(s *Session, r run) (result, error) {
				var res result
				var err error
				if res.neg, err = s.Negotiate(ctx, r.sys); err != nil {
					return res, err
				}
				if err := s.ConnectQPs(ctx, func(context.Context) error {
					connected <- s.Config().Role
					return nil
				}); err != nil {
					return res, err
				}
				if err := s.ConnectQPs(ctx, func(context.Context) error { return nil }); !errors.Is(err, ErrOutOfOrder) {
					return res, fmt.Errorf("second ConnectQPs: %v, want ErrOutOfOrder", err)
				}
				return driveKeyed(ctx, s, r, res)
			}
			var sres result
			var serr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				sres, serr = side(ss, sin)
			}()
			cres, cerr := side(cs, cin)
			<-done
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			if len(connected) != 2 {
				t.Errorf("connect called %d times, want 2", len(connected))
			}
			want := expandCM(tt.plan, 2)
			for _, m := range []*chanMessenger{mc, ms} {
				var got []int
				for _, b := range m.sent {
					got = append(got, len(b))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("sent %v\nwant %v", got, want)
				}
				// ConnectQPs' barriers carry perftest's still empty key.
				for _, b := range m.sent[4:6] {
					if !bytes.Equal(b, make([]byte, DestBinarySize)) {
						t.Errorf("ConnectQPs barrier %x, want zeros", b)
					}
				}
			}
			if fmt.Sprint(cres.remoteKeys) != fmt.Sprint(sin.keys) || fmt.Sprint(sres.remoteKeys) != fmt.Sprint(cin.keys) {
				t.Errorf("keys: client got %+v, server got %+v", cres.remoteKeys, sres.remoteKeys)
			}
		})
	}
}

// driveKeyed is drive from ExchangeKeys on.
func driveKeyed(ctx context.Context, s *Session, r run, res result) (result, error) {
	var err error
	res.remoteKeys, err = s.ExchangeKeys(ctx, r.keys, nil)
	if err != nil {
		return res, err
	}
	if res.runs = s.Runs(); res.runs {
		if err := s.BeforeRun(ctx); err != nil {
			return res, err
		}
		rep, ok, err := s.AfterRun(ctx, r.report)
		if err != nil {
			return res, err
		}
		if ok {
			res.afterRun = &rep
		}
	}
	rep, ok, err := s.Finish(ctx, r.report)
	if ok {
		res.finish = &rep
	}
	return res, err
}

func TestConnectQPsOnTCP(t *testing.T) {
	c, _ := tcpPair(t)
	s, err := NewSession(c, Config{Role: Client, Verb: Write, Kind: BW})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ConnectQPs(context.Background(), nil); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("ConnectQPs on a TCP session: %v, want ErrOutOfOrder", err)
	}
}

// TestDestBinary checks the layout against a struct pingpong_dest as
// perftest's rdma_write_keys fills it (htobe32/htobe64 of each field).
func TestDestBinary(t *testing.T) {
	d := Dest{LID: 0x1234, OutReads: 128, QPN: 0x000011, PSN: 0xabcdef, RKey: 0xdeadbeef,
		VAddr: 0x0000_7f12_3456_7000, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 15: 2}, SRQN: 7}
	want := []byte{
		0, 0, 0x12, 0x34, 0, 0, 0, 128, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef,
		0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0x7f, 0x12, 0x34, 0x56, 0x70, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2,
		0, 0, 0, 7, 0, 0, 0, 0,
	}
	got := MarshalDestBinary(d)
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalDestBinary\n got %x\nwant %x", got, want)
	}
	// perftest leaves the padding and gid_index as they were: ignored.
	junk := bytes.Clone(want)
	junk[20], junk[23], junk[55] = 0xaa, 0xbb, 3
	back, err := ParseDestBinary(junk)
	if err != nil || back != d {
		t.Fatalf("ParseDestBinary = %+v, %v; want %+v", back, err, d)
	}
	for _, bad := range [][]byte{want[:55], append(bytes.Clone(want), 0), func() []byte {
		b := bytes.Clone(want)
		b[0] = 1 // LID above 16 bits
		return b
	}()} {
		if _, err := ParseDestBinary(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseDestBinary(%x): %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzParseDestBinary(f *testing.F) {
	f.Add(MarshalDestBinary(Dest{QPN: 0x11, GID: [16]byte{15: 1}}))
	f.Add(make([]byte, DestBinarySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDestBinary(b)
		if err != nil {
			return
		}
		again, err := ParseDestBinary(MarshalDestBinary(d))
		if err != nil || again != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, again, err)
		}
	})
}
