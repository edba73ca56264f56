package shm

// Attacks mounted the way a hostile local process would: another
// process (the test binary run again with SHM_TEST_ROLE set, as uid
// 65534 where the attack is another user's), speaking the public API
// and the shm control protocol. Each child prints one result line.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

const nobody = 65534

// needRoot skips a test that must run a process as another uid, unless
// under CI, which must be able to.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI must run the shm attack tests as root (they run a child as uid 65534)")
		}
		t.Skip("needs root to run a child as uid 65534")
	}
}

// roleProc is a child process playing an attacker.
type roleProc struct {
	in    io.WriteCloser
	lines chan string
}

// startRole runs the test binary as role, as uid nobody if asNobody.
func startRole(t *testing.T, role string, asNobody bool, env ...string) *roleProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if asNobody {
		exe = publicCopy(t, exe)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "SHM_TEST_ROLE="+role), env...)
	cmd.Stderr = os.Stderr
	if asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &roleProc{in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return p
}

func (p *roleProc) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatal("attacker process ended")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no answer from the attacker process")
	}
	return ""
}

// publicCopy copies the test binary where uid nobody can run it.
func publicCopy(t *testing.T, exe string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "shm-attack")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "shm.test")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func runRole(role string) {
	in := bufio.NewScanner(os.Stdin)
	switch role {
	case "readgrant":
		roleReadGrant(in)
	case "impostor":
		roleImpostor()
	case "squatter":
		roleSquatter(in)
	case "stranger":
		roleStranger()
	default:
		fmt.Println("ERR unknown role", role)
	}
}

// TestReadGrantStaysReadOnly: a peer whose QP may only READ a region
// gets a grant it cannot turn into a writable mapping, however it asks:
// mmap, mprotect, reopening the fd through /proc, or the owner's own fds.
// Two owners: root granting READ (the region allows WRITE, the QP not)
// to uid 65534; and an owner whose region allows no remote write, to a
// peer of the same uid.
func TestReadGrantStaysReadOnly(t *testing.T) {
	cases := []struct {
		name     string
		mrAccess verbs.Access
		qpAccess verbs.Access
		asNobody bool
	}{
		{"other uid, QP grants READ only", fullAccess, verbs.AccessLocalWrite | verbs.AccessRemoteRead, true},
		{"same uid, region allows READ only", verbs.AccessLocalWrite | verbs.AccessRemoteRead, fullAccess, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.asNobody {
				needRoot(t)
			}
			dev, err := Open(Config{AllowUIDs: []uint32{nobody}})
			if err != nil {
				t.Fatal(err)
			}
			s := &side{dev: dev}
			s.pd, _ = dev.AllocPD()
			s.cq, _ = dev.CreateCQ(64, nil)
			if s.mr, err = s.pd.AllocMR(1<<16, c.mrAccess); err != nil {
				t.Fatal(err)
			}
			s.qp, _ = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
			defer s.close(t)
			copy(s.mr.Bytes(), "owner's data")
			p := startRole(t, "readgrant", c.asNobody)
			peer, err := parseInfo(p.line(t))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(p.in, s.info())
			if err := cm.Connect(s.qp, s.endpoint(), peer.ep, params(sideOpts{qpAccess: c.qpAccess})); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(p.in, "GO") // our QP serves the attacker's now
			res := p.line(t)
			if res != "READONLY" {
				t.Errorf("attacker: %s; want READONLY", res)
			}
			if !bytes.HasPrefix(s.mr.Bytes(), []byte("owner's data")) {
				t.Errorf("the region now starts %q", s.mr.Bytes()[:16])
			}
		})
	}
}

// roleReadGrant connects a QP to the owner's, asks for a READ grant of
// its region over the control protocol, and tries to write through it.
func roleReadGrant(in *bufio.Scanner) {
	dev, err := Open(Config{AllowUIDs: []uint32{0, uint32(os.Getuid())}})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	s := &side{dev: dev}
	s.pd, _ = dev.AllocPD()
	s.cq, _ = dev.CreateCQ(64, nil)
	s.mr, _ = s.pd.AllocMR(4096, fullAccess)
	s.qp, _ = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	fmt.Println(s.info())
	if !in.Scan() {
		return
	}
	owner, err := parseInfo(in.Text())
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	if err := cm.Connect(s.qp, s.endpoint(), owner.ep, params(sideOpts{})); err != nil {
		fmt.Println("ERR", err)
		return
	}
	if !in.Scan() { // the owner's QP is connected
		return
	}
	qp := s.qp.(*QP)
	r, err := qp.conn.call(&ctrl{typ: mGrantReq, a: qp.qpn, b: owner.ep.QPN, c: owner.rkey, d: uint32(verbs.AccessRemoteRead)}, nil, 5*time.Second)
	if err != nil || r.m.d != grantOK {
		fmt.Printf("ERR no grant: %v %+v\n", err, r.m)
		return
	}
	size := int(r.m.y)
	write := func(how string, mem []byte) bool {
		copy(mem, "pwned by "+how)
		fmt.Println("WROTE", how)
		return true
	}
	if mem, err := unix.Mmap(r.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil && write("mmap", mem) {
		return
	}
	if mem, err := unix.Mmap(r.fd, 0, size, unix.PROT_READ, unix.MAP_SHARED); err == nil {
		if unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE) == nil && write("mprotect", mem) {
			return
		}
	} else {
		fmt.Println("ERR cannot even map the grant read-only:", err)
		return
	}
	if fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", r.fd), unix.O_RDWR, 0); err == nil {
		if mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil && write("reopen", mem) {
			return
		}
		if _, err := unix.Pwrite(fd, []byte("pwned by pwrite"), 0); err == nil {
			fmt.Println("WROTE pwrite")
			return
		}
	}
	// The owner's own fds, if /proc lets us at them.
	dir := fmt.Sprintf("/proc/%d/fd", os.Getppid())
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		link, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if !strings.Contains(link, "softrdma-shm-mr") {
			continue
		}
		fd, err := unix.Open(filepath.Join(dir, e.Name()), unix.O_RDWR, 0)
		if err != nil {
			continue
		}
		if mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil && write("owner's fd "+e.Name(), mem) {
			return
		}
		if _, err := unix.Pwrite(fd, []byte("pwned by pwrite"), 0); err == nil {
			fmt.Println("WROTE pwrite on the owner's fd")
			return
		}
	}
	fmt.Println("READONLY")
	for in.Scan() {
	}
}

// TestImpostorHello: another process of an allowed user connects to a
// device saying it is a device that is connected to it (its HELLO
// carries that device's id), then disconnects. The real peer's ring,
// parked for a QP not yet connected, must survive, and the connection
// be refused and counted.
func TestImpostorHello(t *testing.T) {
	a, b := newSide(t, sideOpts{}), newSide(t, sideOpts{})
	defer func() { b.close(t); a.close(t) }()
	// b's QP connects to a's, which is not connected yet: b's ring
	// waits at a.
	if err := cm.Connect(b.qp, b.endpoint(), a.endpoint(), params(sideOpts{rnrRetry: 7})); err != nil {
		t.Fatal(err)
	}
	k := inboxKey{peer: b.dev.id, local: a.qp.QPNum(), remot: b.qp.QPNum()}
	parked := func() bool {
		a.dev.mu.Lock()
		defer a.dev.mu.Unlock()
		return a.dev.inboxes[k] != nil
	}
	for deadline := time.Now().Add(5 * time.Second); !parked(); {
		if time.Now().After(deadline) {
			t.Fatal("b's ring is not parked at a")
		}
		time.Sleep(time.Millisecond)
	}
	p := startRole(t, "impostor", false, fmt.Sprintf("SHM_TEST_FORGE=%x", b.dev.id), fmt.Sprintf("SHM_TEST_VICTIM=%x", a.dev.id))
	if l := p.line(t); !strings.HasPrefix(l, "DONE") {
		t.Fatalf("impostor: %s", l)
	}
	p.in.Close()
	p.line(t) // "GONE": the impostor closed its device
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && a.dev.ctr.helloRefused.Load() == 0; {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a's reader would have seen the impostor go
	if !parked() {
		t.Fatal("the impostor's disconnection unmapped b's ring at a")
	}
	if n := a.dev.ctr.helloRefused.Load(); n != 1 {
		t.Errorf("hello_refused %d, want 1", n)
	}
	// And the pair works.
	if err := cm.Connect(a.qp, a.endpoint(), b.endpoint(), params(sideOpts{rnrRetry: 7})); err != nil {
		t.Fatal(err)
	}
	postRecv(t, a.qp, 1, a.mr.SGE(0, 64))
	postSend(t, b.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{b.mr.SGE(0, 8)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Errorf("a's receive: %+v", wc)
	}
	poll(t, b.cq, 1)
}

// roleImpostor opens a device, takes the forged id for its own and
// connects to the victim.
func roleImpostor() {
	forge, _ := strconv.ParseUint(os.Getenv("SHM_TEST_FORGE"), 16, 64)
	victim, _ := strconv.ParseUint(os.Getenv("SHM_TEST_VICTIM"), 16, 64)
	dev, err := Open(Config{})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	dev.id = forge
	_, err = dev.connTo(victim, "impostor")
	time.Sleep(100 * time.Millisecond) // let the victim act on the HELLO
	fmt.Println("DONE", err)
	io.Copy(io.Discard, os.Stdin)
	dev.Close()
	fmt.Println("GONE")
}

// TestServiceSquat: uid 65534 binds root's name for a service first.
// Root's lookup must not take the squatter's device for root's service
// (even though root's device lets uid 65534 connect), and root's
// BindService must say who holds the name.
func TestServiceSquat(t *testing.T) {
	needRoot(t)
	const svc = 0x0106_0000_0000_1e61 // rdma_cm TCP port 7777
	p := startRole(t, "squatter", true, fmt.Sprintf("SHM_TEST_SERVICE=%x", uint64(svc)))
	if l := p.line(t); l != "BOUND" {
		t.Fatalf("squatter: %s", l)
	}
	dev, err := Open(Config{AllowUIDs: []uint32{nobody}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	g, err := dev.LookupService(1, netip.MustParseAddr("127.0.0.1"), svc)
	if err == nil {
		t.Errorf("lookup of root's service reached %v (uid %d's device)", g, uidOfGID(g))
	}
	if _, err := dev.BindService(1, svc); err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("BindService: %v; want it to name the squatter's uid", err)
	}
	if n := dev.ctr.serviceSquatted.Load(); n < 2 {
		t.Errorf("service_squatted %d, want 2", n)
	}
}

func uidOfGID(g verbs.GID) uint32 {
	return uint32(g[4])<<24 | uint32(g[5])<<16 | uint32(g[6])<<8 | uint32(g[7])
}

// roleSquatter binds root's name for the service and answers lookups
// with its own device.
func roleSquatter(in *bufio.Scanner) {
	svc, _ := strconv.ParseUint(os.Getenv("SHM_TEST_SERVICE"), 16, 64)
	dev, err := Open(Config{AllowUIDs: []uint32{0}})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	dev.uid = 0 // the name BindService takes is root's
	if _, err := dev.BindService(1, svc); err != nil {
		fmt.Println("ERR", err)
		return
	}
	fmt.Println("BOUND")
	for in.Scan() {
	}
}

// TestOtherUIDRefused: a process of a uid the device does not allow
// cannot connect to it (nor be connected to).
func TestOtherUIDRefused(t *testing.T) {
	needRoot(t)
	dev, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p := startRole(t, "stranger", true, fmt.Sprintf("SHM_TEST_VICTIM=%x", dev.id))
	if l := p.line(t); !strings.HasPrefix(l, "REFUSED") {
		t.Errorf("uid 65534 connecting to root's device: %s", l)
	}
}

// roleStranger connects to the victim device and sends a RING over the
// connection if it gets one.
func roleStranger() {
	victim, _ := strconv.ParseUint(os.Getenv("SHM_TEST_VICTIM"), 16, 64)
	dev, err := Open(Config{AllowUIDs: []uint32{0}})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	defer dev.Close()
	c, err := dev.connTo(victim, "stranger")
	if err == nil {
		var b [ctrlHdr]byte
		(&ctrl{typ: mWake}).encode(b[:])
		time.Sleep(100 * time.Millisecond)
		if _, err = c.uc.Write(b[:]); err == nil {
			time.Sleep(100 * time.Millisecond)
			_, err = c.uc.Write(b[:])
		}
	}
	if err != nil {
		fmt.Println("REFUSED", err)
		return
	}
	fmt.Println("CONNECTED")
}
