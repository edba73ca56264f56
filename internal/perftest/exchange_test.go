package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const pcapDir = "../../testdata/rxe-pcaps"

// expand turns a plan written as letters into the sizes of the messages one
// side writes, in order. The letters follow the package documentation:
// V version, S a sys-data int32, M the MTU, K a key per QP, B a barrier
// (QP 0's key), R a report swap (5 fields), C close (barrier and "done").
// The plans below are transcribed from perftest 4.5's *_bw.c/*_lat.c, not
// from this package's code.
func expand(plan string, numQPs int, withGID bool) []int {
	key := KeyMsgSize
	if withGID {
		key = KeyMsgSizeGID
	}
	var sizes []int
	for _, c := range strings.ReplaceAll(plan, " ", "") {
		switch c {
		case 'V':
			sizes = append(sizes, 16)
		case 'S':
			sizes = append(sizes, 4)
		case 'M':
			sizes = append(sizes, 2)
		case 'K':
			for range numQPs {
				sizes = append(sizes, key)
			}
		case 'B':
			sizes = append(sizes, key)
		case 'R':
			sizes = append(sizes, 8, 8, 8, 8, 8)
		case 'C':
			sizes = append(sizes, key, 5)
		case '|':
		default:
			panic("bad plan letter " + string(c))
		}
	}
	return sizes
}

// split cuts b into pieces of the given sizes and fails unless they add up.
func split(t *testing.T, b []byte, sizes []int) [][]byte {
	t.Helper()
	var out [][]byte
	for _, n := range sizes {
		if len(b) < n {
			t.Fatalf("stream too short for plan: %d bytes left, need %d", len(b), n)
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left over after plan: %q", len(b), b)
	}
	return out
}

type run struct {
	sys    SysInfo
	keys   []Dest
	report BWReport
}

// result is what one side learned.
type result struct {
	neg           Negotiated
	remoteKeys    []Dest
	connectedKeys []Dest
	connectAt     int // bytes written when connect was called (replays only)
	afterRun      *BWReport
	finish        *BWReport
	runs          bool
}

// drive runs one side through the whole scripted sequence, with measure
// standing for the measurement (called once).
func drive(ctx context.Context, s *Session, r run, written func() int) (result, error) {
	var res result
	var err error
	if res.neg, err = s.Negotiate(ctx, r.sys); err != nil {
		return res, err
	}
	res.remoteKeys, err = s.ExchangeKeys(ctx, r.keys, func(remote []Dest) error {
		res.connectedKeys = remote
		if written != nil {
			res.connectAt = written()
		}
		return nil
	})
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

// fromRecording extracts one side's inputs from its recorded bytes.
func fromRecording(t *testing.T, pieces [][]byte, plan string, withGID bool) (Config, run) {
	t.Helper()
	var cfg Config
	var r run
	cfg.Version = cString(pieces[0])
	r.sys.PageSize = int32(binary.BigEndian.Uint32(pieces[1]))
	r.sys.CacheLineSize = int32(binary.BigEndian.Uint32(pieces[2]))
	r.sys.MTU = MTU(pieces[3][0] - '0')
	i := 4
	for _, c := range strings.ReplaceAll(plan[4:], " ", "") {
		switch c {
		case 'K':
			if r.keys == nil {
				d, err := ParseDest(pieces[i], withGID)
				if err != nil {
					t.Fatal(err)
				}
				r.keys = []Dest{d}
			}
			i++
		case 'B':
			i++
		case 'C':
			i += 2
		case 'R':
			u := func(k int) uint64 { return binary.BigEndian.Uint64(pieces[i+k]) }
			f := func(k int) float64 { return math.Float64frombits(u(k)) }
			r.report = BWReport{Size: u(0), Iters: u(1), BWPeak: f(2), BWAvg: f(3), MsgRate: f(4)}
			i += 5
		}
	}
	return cfg, r
}

// TestReplay replays each side of each capture against the other side's
// recorded bytes: every byte written must equal the capture, in the
// captured order relative to the peer's bytes.
func TestReplay(t *testing.T) {
	tests := []struct {
		file      string
		verb      Verb
		kind      Kind
		plan      string
		truncated bool // the capture stops before the test's end
		mtu       MTU
	}{
		{"write_bw.pcap", Write, BW, "VSSM K K B B R C", false, MTU1024},
		{"write_bw_mtu4096.pcap", Write, BW, "VSSM K K B B R C", false, MTU4096},
		{"read_bw.pcap", Read, BW, "VSSM K K B B R C", false, MTU1024},
		{"send_bw.pcap", Send, BW, "VSSM K B K B C", false, MTU1024},
		{"atomic_lat.pcap", Atomic, Lat, "VSSM B K K B", true, MTU1024},
	}
	for _, tt := range tests {
		events := loadTCP(t, filepath.Join(pcapDir, tt.file), DefaultPort)
		for _, role := range []Role{Client, Server} {
			t.Run(tt.file+"/"+role.String(), func(t *testing.T) {
				ours := stream(events, role == Client)
				theirs := stream(events, role != Client)
				sizes := expand(tt.plan, 1, true)
				cfg, in := fromRecording(t, split(t, ours, sizes), tt.plan, true)
				_, peer := fromRecording(t, split(t, theirs, sizes), tt.plan, true)
				if in.sys.MTU != tt.mtu || cfg.Version != "6.06" || in.sys.PageSize != 4096 || in.sys.CacheLineSize != 64 {
					t.Fatalf("recorded inputs: version %q, %+v", cfg.Version, in.sys)
				}
				cfg.Role, cfg.Verb, cfg.Kind, cfg.WithGID = role, tt.verb, tt.kind, true

				conn := newScriptConn(events, role == Client, doneTail(theirs))
				s, err := NewSession(conn, cfg)
				if err != nil {
					t.Fatal(err)
				}
				res, err := drive(context.Background(), s, in, func() int { return len(conn.Written) })
				if tt.truncated {
					// The capture ends after the measurement. The client's
					// close starts with its barrier; the server's waits.
					if !errors.Is(err, io.EOF) {
						t.Fatalf("err = %v, want EOF at the end of the capture", err)
					}
					if role == Client {
						extra := conn.Written[len(ours):]
						if string(extra) != string(MarshalDest(in.keys[0], true)) {
							t.Errorf("client's close began with %q, want its barrier", extra)
						}
						conn.Written = conn.Written[:len(ours)]
					}
				} else if err != nil {
					t.Fatal(err)
				}
				checkWritten(t, conn, ours)
				// Everything but the peer's final "done", which nobody reads.
				if !tt.truncated && conn.ReadPos != len(conn.Peer)-5 {
					t.Errorf("read %d of the peer's %d bytes", conn.ReadPos, len(conn.Peer))
				}

				if res.neg.RemoteVersion != "6.06" || res.neg.MTU != tt.mtu || res.neg.RemoteMTU != tt.mtu ||
					res.neg.PageSize != 4096 || res.neg.CacheLineSize != 64 {
					t.Errorf("negotiated %+v", res.neg)
				}
				if len(res.remoteKeys) != 1 || res.remoteKeys[0] != peer.keys[0] ||
					len(res.connectedKeys) != 1 || res.connectedKeys[0] != peer.keys[0] {
					t.Errorf("remote keys %+v, connect got %+v; want %+v", res.remoteKeys, res.connectedKeys, peer.keys[0])
				}
				// QPs go to RTR/RTS right after the first key round.
				wantConnectAt := 16 + 4 + 4 + 2 + KeyMsgSizeGID
				if tt.kind == Lat && tt.verb != Send {
					wantConnectAt += KeyMsgSizeGID
				}
				if res.connectAt != wantConnectAt {
					t.Errorf("connect called after %d bytes written, want %d", res.connectAt, wantConnectAt)
				}
				wantRuns := role == Client || tt.verb == Send
				if res.runs != wantRuns {
					t.Errorf("Runs() = %v, want %v", res.runs, wantRuns)
				}
				if strings.Contains(tt.plan, "R") {
					if res.finish == nil || *res.finish != peer.report {
						t.Errorf("Finish got report %+v, want %+v", res.finish, peer.report)
					}
				} else if res.finish != nil {
					t.Errorf("Finish swapped reports in a test without them")
				}
			})
		}
	}
}

// TestRecordedReportUnits checks the unit of the client's recorded report:
// message rate × size = average bandwidth in MiB/s (perftest's "MB/sec").
func TestRecordedReportUnits(t *testing.T) {
	events := loadTCP(t, filepath.Join(pcapDir, "write_bw.pcap"), DefaultPort)
	plan := "VSSM K K B B R C"
	_, in := fromRecording(t, split(t, stream(events, true), expand(plan, 1, true)), plan, true)
	r := in.report
	if r.Size != 4096 || r.Iters != 20 {
		t.Fatalf("report %+v", r)
	}
	if got := r.MsgRate * 1e6 * float64(r.Size) / (1 << 20); math.Abs(got-r.BWAvg) > 1e-9*r.BWAvg {
		t.Errorf("rate×size = %v MiB/s, average %v", got, r.BWAvg)
	}
	var b strings.Builder
	if err := WriteBWRow(&b, r, BWFormat{}); err != nil {
		t.Fatal(err)
	}
	// REPORT_FMT: " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf"
	if want := " 4096   " + "    " + "20        " + "       " + "5.30   " + "            " + "4.68   " + "\t\t   " + "0.001197" + "\n"; b.String() != want {
		t.Errorf("row %q, want %q", b.String(), want)
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
	var aerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		server, aerr = ln.Accept()
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	wg.Wait()
	if err != nil || aerr != nil {
		t.Fatal(err, aerr)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// recordConn logs the size of every Write.
type recordConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestLoopbackPlans runs both sides of every test over real TCP, with two
// QPs, and checks each side's writes against the plan transcribed from
// perftest's sources.
func TestLoopbackPlans(t *testing.T) {
	tests := []struct {
		verb           Verb
		kind           Kind
		duplex         bool
		withGID        bool
		client, server string
	}{
		{Write, BW, false, true, "VSSM K K B | B R C", "VSSM K K B | B R C"},
		{Read, BW, false, false, "VSSM K K B | B R C", "VSSM K K B | B R C"},
		{Atomic, BW, false, true, "VSSM K K B | B R C", "VSSM K K B | B R C"},
		{Write, BW, true, true, "VSSM K K B | B R | C", "VSSM K K B | B R | C"},
		{Read, BW, true, true, "VSSM K K B | B R | C", "VSSM K K B | B R | C"},
		{Atomic, BW, true, false, "VSSM K K B | B R | C", "VSSM K K B | B R | C"},
		{Send, BW, false, true, "VSSM K B K | B | C", "VSSM K B K | B | C"},
		{Send, BW, true, true, "VSSM K B K | B R | C", "VSSM K B K | B R | C"},
		{Write, Lat, false, true, "VSSM B K K B |", "VSSM B K K B |"},
		{Read, Lat, false, true, "VSSM B K K B | C", "VSSM B K K B | C"},
		{Atomic, Lat, false, false, "VSSM B K K B | C", "VSSM B K K B | C"},
		{Send, Lat, false, true, "VSSM K B K | B | C", "VSSM K B K | B | C"},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%v_%v_duplex=%v_gid=%v", tt.verb, tt.kind, tt.duplex, tt.withGID)
		t.Run(name, func(t *testing.T) {
			c, s := tcpPair(t)
			rc, rs := &recordConn{Conn: c}, &recordConn{Conn: s}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mk := func(role Role, conn net.Conn, base uint32, mtu MTU) (*Session, run) {
				sess, err := NewSession(conn, Config{Role: role, Verb: tt.verb, Kind: tt.kind, NumQPs: 2,
					Duplex: tt.duplex, WithGID: tt.withGID})
				if err != nil {
					t.Fatal(err)
				}
				var gid [16]byte
				if tt.withGID {
					gid = [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: byte(role) + 1}
				}
				keys := []Dest{
					{OutReads: 1, QPN: base + 1, PSN: base + 2, RKey: base + 3, VAddr: uint64(base) << 20, GID: gid},
					{OutReads: 1, QPN: base + 11, PSN: base + 12, RKey: base + 13, VAddr: uint64(base)<<20 + 4096, GID: gid},
				}
				rep := BWReport{Size: 65536, Iters: 2000, BWPeak: float64(base), BWAvg: float64(base) / 2, MsgRate: 0.25}
				return sess, run{sys: SysInfo{PageSize: 4096 * int32(role+1), CacheLineSize: 64, MTU: mtu}, keys: keys, report: rep}
			}
			cs, cin := mk(Client, rc, 0x100, MTU4096)
			ss, sin := mk(Server, rs, 0x200, MTU1024)

			var sres result
			var serr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				sres, serr = drive(ctx, ss, sin, nil)
			}()
			cres, cerr := drive(ctx, cs, cin, nil)
			<-done
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			for _, side := range []struct {
				name string
				got  []int
				plan string
			}{{"client", rc.writes, tt.client}, {"server", rs.writes, tt.server}} {
				want := expand(side.plan, 2, tt.withGID)
				if fmt.Sprint(side.got) != fmt.Sprint(want) {
					t.Errorf("%s wrote %v\nwant          %v", side.name, side.got, want)
				}
			}
			for _, r := range []result{cres, sres} {
				if r.neg.MTU != MTU1024 || r.neg.PageSize != 8192 || r.neg.RemoteVersion != Version {
					t.Errorf("negotiated %+v", r.neg)
				}
			}
			if fmt.Sprint(cres.remoteKeys) != fmt.Sprint(sin.keys) || fmt.Sprint(sres.remoteKeys) != fmt.Sprint(cin.keys) {
				t.Errorf("keys: client got %+v, server got %+v", cres.remoteKeys, sres.remoteKeys)
			}
			if strings.Contains(tt.client, "R") {
				for _, pair := range []struct {
					got  *BWReport
					want BWReport
				}{{firstNonNil(cres.afterRun, cres.finish), sin.report}, {firstNonNil(sres.afterRun, sres.finish), cin.report}} {
					if pair.got == nil || *pair.got != pair.want {
						t.Errorf("report %+v, want %+v", pair.got, pair.want)
					}
				}
			}
		})
	}
}

func firstNonNil(a, b *BWReport) *BWReport {
	if a != nil {
		return a
	}
	return b
}

// TestRunAllPlans checks the per-size syncs of -a, driving several sizes.
func TestRunAllPlans(t *testing.T) {
	tests := []struct {
		verb   Verb
		duplex bool
		plan   string // client writes, with the per-size part repeated 3 times
	}{
		{Write, true, "VSSM K K B | B B R | B B R | B B R | C"},
		{Write, false, "VSSM K K B | | | | B R C"},
		{Atomic, true, "VSSM K K B | B R | B R | B R | C"},
		{Send, false, "VSSM K B K | B B | B B | B B | C"},
		{Send, true, "VSSM K B K | B R B | B R B | B R B | C"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v_duplex=%v", tt.verb, tt.duplex), func(t *testing.T) {
			c, s := tcpPair(t)
			rc := &recordConn{Conn: c}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg := Config{Verb: tt.verb, Kind: BW, Duplex: tt.duplex, RunAll: true, WithGID: true}
			side := func(role Role, conn net.Conn) error {
				cfg := cfg
				cfg.Role = role
				sess, err := NewSession(conn, cfg)
				if err != nil {
					return err
				}
				if _, err := sess.Negotiate(ctx, DefaultSysInfo(MTU1024)); err != nil {
					return err
				}
				if _, err := sess.ExchangeKeys(ctx, []Dest{{QPN: uint32(role)}}, nil); err != nil {
					return err
				}
				if sess.Runs() {
					for range 3 {
						if err := sess.BeforeRun(ctx); err != nil {
							return err
						}
						if _, _, err := sess.AfterRun(ctx, BWReport{Size: 2}); err != nil {
							return err
						}
					}
				}
				_, _, err = sess.Finish(ctx, BWReport{})
				return err
			}
			errc := make(chan error, 1)
			go func() { errc <- side(Server, s) }()
			if err := side(Client, rc); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if want := expand(tt.plan, 1, true); fmt.Sprint(rc.writes) != fmt.Sprint(want) {
				t.Errorf("client wrote %v\nwant         %v", rc.writes, want)
			}
		})
	}
}

func TestNegotiateRules(t *testing.T) {
	tests := []struct {
		name      string
		peer      []byte // what the server sends back, in swap order
		localMTU  MTU
		wantErr   error
		wantMTU   MTU
		remoteMTU MTU
	}{
		{"smaller remote", peerBytes("6.06", 4096, 64, "3"), MTU4096, nil, MTU1024, MTU1024},
		{"larger remote", peerBytes("6.06", 4096, 64, "5"), MTU2048, nil, MTU2048, MTU4096},
		{"invalid remote", peerBytes("6.06", 4096, 64, "9"), MTU2048, nil, MTU2048, 0},
		{"newer version", peerBytes("6.10", 4096, 64, "3"), MTU1024, nil, MTU1024, MTU1024},
		{"old version", peerBytes("5.60", 4096, 64, "3"), MTU1024, ErrIncompatibleVersion, 0, 0},
		{"empty version", peerBytes("", 4096, 64, "3"), MTU1024, ErrIncompatibleVersion, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := &scriptConn{Peer: tt.peer, Need: make([]int, len(tt.peer))}
			s, err := NewSession(conn, Config{Role: Client, Verb: Write, Kind: BW})
			if err != nil {
				t.Fatal(err)
			}
			n, err := s.Negotiate(context.Background(), SysInfo{PageSize: 65536, CacheLineSize: 128, MTU: tt.localMTU})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if len(conn.Written) != 16 {
					t.Errorf("wrote %d bytes after refusing the peer", len(conn.Written))
				}
				return
			}
			if n.MTU != tt.wantMTU || n.RemoteMTU != tt.remoteMTU || n.PageSize != 65536 || n.CacheLineSize != 128 {
				t.Errorf("negotiated %+v", n)
			}
			want := append(append([]byte("6.06"), make([]byte, 12)...), 0, 1, 0, 0, 0, 0, 0, 128, byte('0'+tt.localMTU), 0)
			if string(conn.Written) != string(want) {
				t.Errorf("wrote %q, want %q", conn.Written, want)
			}
		})
	}
}

func peerBytes(version string, page, cache uint32, mtu string) []byte {
	var v [16]byte
	copy(v[:], version)
	b := append(v[:], binary.BigEndian.AppendUint32(nil, page)...)
	b = binary.BigEndian.AppendUint32(b, cache)
	return append(b, mtu[0], 0)
}

func TestSessionOrder(t *testing.T) {
	conn := &scriptConn{}
	s, err := NewSession(conn, Config{Role: Server, Verb: Write, Kind: BW})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ExchangeKeys(context.Background(), []Dest{{}}, nil); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("ExchangeKeys first: %v", err)
	}
	if err := s.BeforeRun(context.Background()); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("BeforeRun first: %v", err)
	}
	if err := s.Barrier(context.Background()); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("Barrier first: %v", err)
	}
	for _, cfg := range []Config{
		{Role: 7}, {Verb: 9}, {Kind: 3}, {NumQPs: -1}, {Kind: Lat, Duplex: true},
		{Version: "0123456789abcdef"},
	} {
		if _, err := NewSession(conn, cfg); err == nil {
			t.Errorf("NewSession(%+v) accepted", cfg)
		}
	}
}

func TestGIDMismatch(t *testing.T) {
	c, s := tcpPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	side := func(role Role, conn net.Conn, gid [16]byte) error {
		sess, _ := NewSession(conn, Config{Role: role, Verb: Write, Kind: BW, WithGID: true})
		if _, err := sess.Negotiate(ctx, DefaultSysInfo(MTU1024)); err != nil {
			return err
		}
		_, err := sess.ExchangeKeys(ctx, []Dest{{GID: gid}}, func([]Dest) error {
			return errors.New("connect must not be called")
		})
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- side(Server, s, [16]byte{0xfe, 0x80, 15: 1}) }()
	cerr := side(Client, c, [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 3})
	if !errors.Is(cerr, ErrGIDMismatch) || !errors.Is(<-errc, ErrGIDMismatch) {
		t.Errorf("errors %v", cerr)
	}
}

func TestContextCancel(t *testing.T) {
	c, _ := tcpPair(t) // the server never answers
	s, err := NewSession(c, Config{Role: Client, Verb: Read, Kind: Lat})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Negotiate(ctx, DefaultSysInfo(MTU1024)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

func TestAtof(t *testing.T) {
	for in, want := range map[string]float64{"6.06": 6.06, "5.70": 5.70, "6.10-rc": 6.1, "": 0, "x": 0, "6.": 6, "1.2.3": 1.2} {
		if got := atof(in); got != want {
			t.Errorf("atof(%q) = %v, want %v", in, got, want)
		}
	}
}

// doneTail is 5 if the stream ends with perftest's unread "done\x00".
func doneTail(b []byte) int {
	if strings.HasSuffix(string(b), "done\x00") {
		return 5
	}
	return 0
}
