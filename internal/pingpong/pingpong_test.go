package pingpong

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const pcapDir = "../../testdata/rxe-pcaps"

func v4GID(a, b, c, d byte) [16]byte {
	return [16]byte{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}
}

func TestMarshalParse(t *testing.T) {
	tests := []struct {
		d    Dest
		wire string
	}{
		// From rc_pingpong.pcap (client 10.77.0.3, server 10.77.0.2).
		{Dest{QPN: 0x11, PSN: 0x5684b1, GID: v4GID(10, 77, 0, 3)}, "0000:000011:5684b1:00000000000000000000ffff0a4d0003\x00"},
		{Dest{QPN: 0x13, PSN: 0xb3e276, GID: v4GID(10, 77, 0, 2)}, "0000:000013:b3e276:00000000000000000000ffff0a4d0002\x00"},
		{Dest{}, "0000:000000:000000:00000000000000000000000000000000\x00"},
		{Dest{LID: 0xbeef, QPN: 0xffffff, PSN: 0xabcdef, GID: [16]byte{0xfe, 0x80, 15: 1}},
			"beef:ffffff:abcdef:fe800000000000000000000000000001\x00"},
	}
	for _, tt := range tests {
		got := Marshal(tt.d)
		if string(got) != tt.wire {
			t.Errorf("Marshal(%+v) = %q, want %q", tt.d, got, tt.wire)
		}
		if len(got) != MsgSize || MsgSize != 52 {
			t.Errorf("len = %d, MsgSize = %d, want 52", len(got), MsgSize)
		}
		back, err := Parse(got)
		if err != nil || back != tt.d {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", got, back, err, tt.d)
		}
	}
}

func TestMarshalMasks24Bits(t *testing.T) {
	got := Marshal(Dest{QPN: 0x1000011, PSN: 0xff5684b1})
	if !strings.HasPrefix(string(got), "0000:000011:5684b1:") || len(got) != MsgSize {
		t.Errorf("got %q", got)
	}
}

func TestParseLenient(t *testing.T) {
	// sscanf("%x:%x:%x:%s") accepts fields of any width.
	d, err := Parse([]byte("1:2:3:00000000000000000000ffff0a4d0003\x00garbage"))
	if err != nil || d != (Dest{LID: 1, QPN: 2, PSN: 3, GID: v4GID(10, 77, 0, 3)}) {
		t.Errorf("got %+v, %v", d, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"0000:000011:5684b1",
		"zzzz:000011:5684b1:00000000000000000000ffff0a4d0003",
		"0000:000011:5684b1:0000",
		"0000:000011:5684b1:0000000000000000000xffff0a4d0003",
		"0000:fffffffff:5684b1:00000000000000000000ffff0a4d0003",
	} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error = %v, want ErrMalformed", in, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("0000:000011:5684b1:00000000000000000000ffff0a4d0003\x00"))
	f.Add([]byte("1:2:3:4"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		if err != nil {
			return
		}
		d.QPN &= 0xffffff
		d.PSN &= 0xffffff
		back, err := Parse(Marshal(d))
		if err != nil || back != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, back, err)
		}
	})
}

// TestReplay runs each side against the other side's captured bytes and
// requires byte-identical output, in the captured order.
func TestReplay(t *testing.T) {
	for _, file := range []string{"rc_pingpong.pcap", "ud_pingpong.pcap"} {
		events := loadTCP(t, filepath.Join(pcapDir, file), DefaultPort)
		clientBytes, serverBytes := stream(events, true), stream(events, false)
		if len(clientBytes) != MsgSize+5 || len(serverBytes) != MsgSize {
			t.Fatalf("%s: client sent %d bytes, server %d; want %d and %d", file, len(clientBytes), len(serverBytes), MsgSize+5, MsgSize)
		}
		clientDest, err := Parse(clientBytes[:MsgSize])
		if err != nil {
			t.Fatal(err)
		}
		serverDest, err := Parse(serverBytes)
		if err != nil {
			t.Fatal(err)
		}

		t.Run(file+"/client", func(t *testing.T) {
			conn := newScriptConn(events, true, 0)
			remote, err := ClientExchange(context.Background(), conn, clientDest)
			if err != nil {
				t.Fatal(err)
			}
			if remote != serverDest {
				t.Errorf("remote = %+v, want %+v", remote, serverDest)
			}
			checkWritten(t, conn, clientBytes)
		})
		t.Run(file+"/server", func(t *testing.T) {
			conn := newScriptConn(events, false, 0)
			var connected *Dest
			remote, err := ServerExchange(context.Background(), conn, serverDest, func(r Dest) error {
				if len(conn.Written) != 0 {
					t.Error("connect called after the reply was sent")
				}
				connected = &r
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if remote != clientDest || connected == nil || *connected != clientDest {
				t.Errorf("remote = %+v, connect got %v; want %+v", remote, connected, clientDest)
			}
			checkWritten(t, conn, serverBytes)
			if conn.ReadPos != len(conn.Peer) {
				t.Errorf("read %d of the client's %d bytes", conn.ReadPos, len(conn.Peer))
			}
		})
	}
}

func TestServerConnectErrorSendsNothing(t *testing.T) {
	events := loadTCP(t, filepath.Join(pcapDir, "rc_pingpong.pcap"), DefaultPort)
	conn := newScriptConn(events, false, 0)
	boom := errors.New("boom")
	_, err := ServerExchange(context.Background(), conn, Dest{}, func(Dest) error { return boom })
	if !errors.Is(err, boom) || len(conn.Written) != 0 {
		t.Errorf("err = %v, wrote %q", err, conn.Written)
	}
}

func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		server, err = ln.Accept()
	}()
	client, cerr := net.Dial("tcp", ln.Addr().String())
	wg.Wait()
	if cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestLoopbackSRQ(t *testing.T) {
	c, s := tcpPair(t)
	var cl, sl []Dest
	for i := range 3 {
		cl = append(cl, Dest{QPN: uint32(0x100 + i), PSN: uint32(i), GID: v4GID(127, 0, 0, 1)})
		sl = append(sl, Dest{QPN: uint32(0x200 + i), PSN: uint32(7 * i), GID: v4GID(127, 0, 0, 2)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var serverGot []Dest
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		serverGot, serr = ServerExchangeN(ctx, s, PadSRQ(sl), nil)
	}()
	clientGot, err := ClientExchangeN(ctx, c, PadSRQ(cl))
	<-done
	if err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if len(clientGot) != SRQMaxQP || len(serverGot) != SRQMaxQP {
		t.Fatalf("got %d and %d addresses", len(clientGot), len(serverGot))
	}
	for i := range 3 {
		if clientGot[i] != sl[i] || serverGot[i] != cl[i] {
			t.Errorf("QP %d: client got %+v, server got %+v", i, clientGot[i], serverGot[i])
		}
	}
	if clientGot[3] != (Dest{}) || serverGot[255] != (Dest{}) {
		t.Error("padding entries are not zero")
	}
}

func TestContextCancel(t *testing.T) {
	c, _ := tcpPair(t) // the server never answers
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ClientExchange(ctx, c, Dest{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

func TestAddressLines(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x5684b1, GID: v4GID(10, 77, 0, 3)}
	tests := []struct{ got, want string }{
		{LocalAddressLine(d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x5684b1, GID ::ffff:10.77.0.3\n"},
		{UDLocalAddressLine(d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x5684b1: GID ::ffff:10.77.0.3\n"},
		{RemoteAddressLine(Dest{LID: 3, QPN: 0x13, PSN: 0xb3e276}), "  remote address: LID 0x0003, QPN 0x000013, PSN 0xb3e276, GID ::\n"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got  %q\nwant %q", tt.got, tt.want)
		}
	}
}

func TestFormatGID(t *testing.T) {
	gid := func(words ...uint16) (g [16]byte) {
		for i, w := range words {
			g[2*i], g[2*i+1] = byte(w>>8), byte(w)
		}
		return g
	}
	tests := []struct {
		g    [16]byte
		want string
	}{
		{v4GID(10, 77, 0, 3), "::ffff:10.77.0.3"},
		{[16]byte{}, "::"},
		{gid(0, 0, 0, 0, 0, 0, 0, 1), "::1"},
		{gid(0, 0, 0, 0, 0, 0, 0x0a4d, 3), "::10.77.0.3"}, // IPv4-compatible: glibc, not netip
		{gid(0, 0, 0, 0, 0, 0xffff, 0, 0), "::ffff:0.0.0.0"},
		{gid(0xfe80, 0, 0, 0, 0x0211, 0x22ff, 0xfe33, 0x4455), "fe80::211:22ff:fe33:4455"},
		{gid(0x2001, 0xdb8, 0, 1, 1, 1, 1, 1), "2001:db8:0:1:1:1:1:1"},
		{gid(1, 0, 0, 2, 0, 0, 3, 4), "1::2:0:0:3:4"},
		{gid(1, 0, 0, 2, 0, 0, 0, 3), "1:0:0:2::3"},
		{gid(1, 0, 0, 0, 0, 0, 0, 0), "1::"},
		{gid(0, 0, 0, 0, 0, 0xfffe, 0x0a4d, 3), "::fffe:a4d:3"},
	}
	for _, tt := range tests {
		if got := FormatGID(tt.g); got != tt.want {
			t.Errorf("FormatGID(% x) = %q, want %q", tt.g, got, tt.want)
		}
	}
}

func TestResultLines(t *testing.T) {
	tests := []struct {
		size, iters int
		elapsed     time.Duration
		want        string
	}{
		{4096, 10, 1234 * time.Microsecond,
			"81920 bytes in 0.00 seconds = 531.09 Mbit/sec\n10 iters in 0.00 seconds = 123.40 usec/iter\n"},
		{4096, 1000, 51_345_678 * time.Nanosecond, // truncated to 51345 usec
			"8192000 bytes in 0.05 seconds = 1276.39 Mbit/sec\n1000 iters in 0.05 seconds = 51.35 usec/iter\n"},
		// 16777217 usec is not a float32: the C float holds 16777216.
		{1, 1, 16_777_217 * time.Microsecond,
			"2 bytes in 16.78 seconds = 0.00 Mbit/sec\n1 iters in 16.78 seconds = 16777216.00 usec/iter\n"},
		{2048, 5, 0, "20480 bytes in 0.00 seconds = inf Mbit/sec\n5 iters in 0.00 seconds = 0.00 usec/iter\n"},
	}
	for _, tt := range tests {
		if got := ResultLines(tt.size, tt.iters, tt.elapsed); got != tt.want {
			t.Errorf("ResultLines(%d, %d, %v) =\n%q\nwant\n%q", tt.size, tt.iters, tt.elapsed, got, tt.want)
		}
	}
}

func TestPadSRQ(t *testing.T) {
	p := PadSRQ([]Dest{{QPN: 1}})
	if len(p) != SRQMaxQP || p[0].QPN != 1 || p[1] != (Dest{}) {
		t.Errorf("PadSRQ = %d entries, first %+v", len(p), p[0])
	}
	var buf bytes.Buffer
	for _, d := range p[:2] {
		buf.Write(Marshal(d))
	}
	if buf.Len() != 2*MsgSize {
		t.Error("length")
	}
}
