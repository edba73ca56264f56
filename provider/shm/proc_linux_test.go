package shm

// Tests between two real processes: the test binary re-executes itself
// as the peer (SHM_TEST_PEER=1), and the two talk over the peer's stdin
// and stdout: endpoints, then one command per line.

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

func TestMain(m *testing.M) {
	if os.Getenv("SHM_TEST_PEER") == "1" {
		runPeer()
		os.Exit(0)
	}
	if role := os.Getenv("SHM_TEST_ROLE"); role != "" {
		runRole(role) // attack_linux_test.go
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// remoteInfo is what each side tells the other.
type remoteInfo struct {
	ep   cm.Endpoint
	rkey uint32
	addr uint64
}

func (s *side) info() string {
	g := s.dev.GID()
	return fmt.Sprintf("EP %d %s %d %d", s.qp.QPNum(), hex.EncodeToString(g[:]), s.mr.RKey(), s.mr.Addr())
}

func parseInfo(line string) (remoteInfo, error) {
	var r remoteInfo
	var gh string
	if _, err := fmt.Sscanf(line, "EP %d %s %d %d", &r.ep.QPN, &gh, &r.rkey, &r.addr); err != nil {
		return r, fmt.Errorf("bad endpoint line %q: %v", line, err)
	}
	g, err := hex.DecodeString(gh)
	if err != nil || len(g) != 16 {
		return r, fmt.Errorf("bad GID in %q", line)
	}
	copy(r.ep.GID[:], g)
	return r, nil
}

func word(b []byte) *uint64 { return (*uint64)(unsafe.Pointer(&b[0])) }

// runPeer is the peer process: one side, connected to the parent, then
// commands from stdin.
func runPeer() {
	fail := func(err error) {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	// SHM_TEST_PEER_CPUPROFILE=FILE profiles the peer until the first
	// "stop": the other half of a benchmark (-test.cpuprofile covers only
	// the parent). Run one benchmark at a time: each peer writes FILE.
	if f := os.Getenv("SHM_TEST_PEER_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err == nil {
			err = pprof.StartCPUProfile(out)
		}
		if err != nil {
			fail(err)
		}
	}
	t := &testing.T{}
	o := sideOpts{regMR: os.Getenv("SHM_TEST_PEER_REGMR") == "1"}
	if os.Getenv("SHM_TEST_PEER_UD") == "1" {
		o.typ = verbs.QPTypeUD
	}
	s := newSide(t, o)
	in := bufio.NewScanner(os.Stdin)
	fmt.Println(s.info())
	if !in.Scan() {
		os.Exit(1)
	}
	r, err := parseInfo(in.Text())
	if err != nil {
		fail(err)
	}
	p := params(sideOpts{rnrRetry: 7})
	if err := cm.Connect(s.qp, s.endpoint(), r.ep, p); err != nil {
		fail(err)
	}
	fmt.Println("READY")
	var stop atomic.Bool
	cmds := make(chan []string)
	go func() {
		for in.Scan() {
			f := strings.Fields(in.Text())
			if len(f) == 1 && f[0] == "stop" {
				pprof.StopCPUProfile() // the benchmark's work is done
				stop.Store(true)
				continue
			}
			cmds <- f
		}
		pprof.StopCPUProfile()
		os.Exit(0) // the parent went away
	}()
	wc := make([]verbs.WC, 16)
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	for f := range cmds {
		switch f[0] {
		case "recv": // recv id off len
			postRecv(t, s.qp, uint64(num(f[1])), s.mr.SGE(num(f[2]), num(f[3])))
			fmt.Println("OK")
		case "poll": // poll n
			for _, w := range poll(t, s.cq, num(f[1])) {
				fmt.Printf("WC %d %d %d %d %d %d\n", w.WRID, w.Status, w.Opcode, w.ByteLen, w.ImmData, w.WCFlags)
			}
		case "dump": // dump off len
			// The MR's lock orders the dump after copies the device's
			// goroutines applied to RegMR memory (for the race detector).
			mr := s.mr.(*MR)
			mr.mu.RLock()
			fmt.Println(hex.EncodeToString(s.mr.Bytes()[num(f[1]) : num(f[1])+num(f[2])]))
			mr.mu.RUnlock()
		case "fadd": // fadd n: n FETCH_ADDs of 1 on the parent's first word
			for i := range num(f[1]) {
				postSend(t, s.qp, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 1, RemoteAddr: r.addr, RKey: r.rkey, SGList: []verbs.SGE{s.mr.SGE(64, 8)}})
				if w := poll(t, s.cq, 1)[0]; w.Status != verbs.WCSuccess {
					fail(fmt.Errorf("fetch-add: %v", w.Status))
				}
			}
			fmt.Println("OK")
		case "wpong": // echo the parent's 8-byte WRITEs until stop
			mine := word(s.mr.Bytes())
			var last uint64
			for n := 0; !stop.Load(); {
				v := atomic.LoadUint64(mine)
				if v == last {
					continue
				}
				last = v
				binary.LittleEndian.PutUint64(s.mr.Bytes()[8:], v)
				n++
				wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: r.addr + 8, RKey: r.rkey, SGList: []verbs.SGE{s.mr.SGE(8, 8)}}
				if n%16 == 0 {
					wr.SendFlags = verbs.SendSignaled
				}
				if err := s.qp.PostSend(&wr); err != nil {
					fail(err)
				}
				if n%16 == 0 {
					poll(t, s.cq, 1)
				}
			}
			fmt.Println("OK")
		case "spong": // echo SENDs until stop
			for i := range 32 {
				postRecv(t, s.qp, uint64(i), s.mr.SGE(4096+i*64, 64))
			}
			sent := 0
			for !stop.Load() {
				n, _ := s.cq.Poll(wc)
				for _, w := range wc[:n] {
					if w.Status != verbs.WCSuccess {
						fail(fmt.Errorf("spong: %+v", w))
					}
					if w.Opcode != verbs.WCRecv {
						continue
					}
					postRecv(t, s.qp, w.WRID, s.mr.SGE(4096+int(w.WRID)*64, 64))
					sent++
					wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(4096+int(w.WRID)*64, int(w.ByteLen))}}
					if sent%16 == 0 {
						wr.SendFlags = verbs.SendSignaled
					}
					if err := s.qp.PostSend(&wr); err != nil {
						fail(err)
					}
				}
			}
			fmt.Println("OK")
		case "sink": // take SENDs until stop
			for i := range 64 {
				postRecv(t, s.qp, uint64(i), s.mr.SGE(4096+i*64, 64))
			}
			for !stop.Load() {
				n, _ := s.cq.Poll(wc)
				for _, w := range wc[:n] {
					if w.Status != verbs.WCSuccess {
						fail(fmt.Errorf("sink: %+v", w))
					}
					postRecv(t, s.qp, w.WRID, s.mr.SGE(4096+int(w.WRID)*64, 64))
				}
			}
			fmt.Println("OK")
		case "udpong", "udsink": // echo or take datagrams until stop (ud_bench_linux_test.go)
			if err := udPeer(s, r, f[0] == "udpong", &stop); err != nil {
				fail(err)
			}
		case "idle":
			for !stop.Load() { // WRITEs need no CPU of the target's
				time.Sleep(time.Millisecond)
			}
			fmt.Println("OK")
		case "exit":
			s.close(t)
			fmt.Println("OK")
			os.Exit(0)
		}
	}
}

// peerProc is a running peer process connected to a side of ours.
type peerProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	info remoteInfo
}

func startPeer(t testing.TB, s *side) *peerProc {
	t.Helper()
	return startPeerEnv(t, s)
}

// startPeerEnv starts a peer with extra environment variables
// (SHM_TEST_PEER_REGMR=1: its MR is RegMR'd Go memory).
func startPeerEnv(t testing.TB, s *side, env ...string) *peerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "SHM_TEST_PEER=1"), env...)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peerProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	info, err := parseInfo(p.line(t))
	if err != nil {
		t.Fatal(err)
	}
	p.info = info
	fmt.Fprintln(in, s.info())
	if err := cm.Connect(s.qp, s.endpoint(), info.ep, params(sideOpts{rnrRetry: 7})); err != nil {
		t.Fatal(err)
	}
	if l := p.line(t); l != "READY" {
		t.Fatalf("peer: %q", l)
	}
	return p
}

func (p *peerProc) line(t testing.TB) string {
	t.Helper()
	if !p.out.Scan() {
		t.Fatalf("peer process ended: %v", p.out.Err())
	}
	return p.out.Text()
}

// do sends a command and returns the first line of the answer.
func (p *peerProc) do(t testing.TB, format string, args ...any) string {
	t.Helper()
	fmt.Fprintf(p.in, format+"\n", args...)
	return p.line(t)
}

func twoProcSide(t testing.TB) *side {
	s := newSide(t, sideOpts{})
	t.Cleanup(func() { s.close(t) })
	return s
}

func TestTwoProcessesEveryOpcode(t *testing.T) {
	s := twoProcSide(t)
	p := startPeer(t, s)
	m := s.mr.Bytes()
	copy(m, "between two processes")
	for i := range 3 {
		if l := p.do(t, "recv %d %d 64", i, i*64); l != "OK" {
			t.Fatal(l)
		}
	}
	postSend(t, s.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(0, 21)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, ImmData: 3, SGList: []verbs.SGE{s.mr.SGE(0, 7)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 4, RemoteAddr: p.info.addr + 1000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 21)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, RemoteAddr: p.info.addr + 2000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 21)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, RemoteAddr: p.info.addr + 2000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(3000, 21)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 5, RemoteAddr: p.info.addr + 4000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(4000, 8)}})
	postSend(t, s.qp, verbs.SendWR{WRID: 7, Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 5, Swap: 11, RemoteAddr: p.info.addr + 4000, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(4008, 8)}})
	for i, wc := range poll(t, s.cq, 7) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
			t.Errorf("completion %d: %+v", i, wc)
		}
	}
	want := []string{"WC 0 0 128 21 0 0", "WC 1 0 128 7 3 2", "WC 2 0 129 21 4 2"}
	fmt.Fprintln(p.in, "poll 3")
	for i := range 3 {
		if l := p.line(t); l != want[i] {
			t.Errorf("peer completion %d: %q, want %q", i, l, want[i])
		}
	}
	if got := p.do(t, "dump 0 21"); got != hex.EncodeToString([]byte("between two processes")) {
		t.Errorf("SEND landed as %s", got)
	}
	if got := p.do(t, "dump 2000 21"); got != hex.EncodeToString([]byte("between two processes")) {
		t.Errorf("WRITE landed as %s", got)
	}
	if string(m[3000:3021]) != "between two processes" {
		t.Errorf("READ got %q", m[3000:3021])
	}
	if a, b := binary.LittleEndian.Uint64(m[4000:]), binary.LittleEndian.Uint64(m[4008:]); a != 0 || b != 5 {
		t.Errorf("atomics returned %d, %d; want 0, 5", a, b)
	}
	if got := p.do(t, "dump 4000 8"); got != "0b00000000000000" {
		t.Errorf("atomic target is %s, want 11", got)
	}
	if l := p.do(t, "exit"); l != "OK" {
		t.Errorf("peer exit: %q", l)
	}
}

// TestAtomicsFromSeveralProcesses has three processes add to one word.
func TestAtomicsFromSeveralProcesses(t *testing.T) {
	atomicsFromSeveralProcesses(t, 500, func(pd verbs.PD) (verbs.MR, error) { return pd.AllocMR(4096, fullAccess) })
}

// atomicsFromSeveralProcesses has three peer processes each FETCH_ADD 1
// to one word of an MR that newMR makes, each times, and checks that
// every add was applied exactly once.
func atomicsFromSeveralProcesses(t *testing.T, each uint64, newMR func(verbs.PD) (verbs.MR, error)) {
	const procs = 3
	dev, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	defer pd.Dealloc()
	cq, _ := dev.CreateCQ(16, nil)
	defer cq.Destroy()
	mr, err := newMR(pd)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	var peers []*peerProc
	for range procs {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Destroy()
		peers = append(peers, startPeer(t, &side{dev: dev, pd: pd, cq: cq, qp: qp, mr: mr}))
	}
	for _, p := range peers {
		fmt.Fprintf(p.in, "fadd %d\n", each)
	}
	for _, p := range peers {
		if l := p.line(t); l != "OK" {
			t.Fatal(l)
		}
	}
	if got := atomic.LoadUint64(word(mr.Bytes())); got != procs*each {
		t.Errorf("counter %d, want %d", got, procs*each)
	}
}

// TestPeerKilled: a peer killed with SIGKILL moves our QP to ERR with its
// receives flushed, promptly, and its memory leaves our address space.
func TestPeerKilled(t *testing.T) {
	s := twoProcSide(t)
	p := startPeer(t, s)
	postSend(t, s.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, RemoteAddr: p.info.addr, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 8)}})
	poll(t, s.cq, 1)
	for i := range 4 {
		postRecv(t, s.qp, uint64(i), s.mr.SGE(0, 8))
	}
	before := countMaps(t)
	p.cmd.Process.Kill()
	for i, wc := range poll(t, s.cq, 4) {
		if wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(i) {
			t.Errorf("%+v", wc)
		}
	}
	if st := s.qp.State(); st != verbs.QPStateErr {
		t.Errorf("QP in %v, want ERR", st)
	}
	if after := countMaps(t); after >= before {
		t.Errorf("%d shared mappings before the peer died, %d after: its memory is still mapped", before, after)
	}
}

// countMaps counts this process's mappings of softrdma memfds.
func countMaps(t testing.TB) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	return strings.Count(string(b), "softrdma-shm")
}
