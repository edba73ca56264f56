package cm_test

// The connection manager over the shared-memory provider, between two
// real processes: the test binary re-executes itself as the listening
// peer (CM_SHM_PEER names its scenario), which prints what happens to it
// on stdout, one event per line, and takes commands on stdin.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

func TestMain(m *testing.M) {
	if sc := os.Getenv("CM_SHM_PEER"); sc != "" {
		if err := shmPeer(sc); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hang bounds every wait of these tests: a guard against a hang, not a
// measurement.
const hang = 30 * time.Second

// shmPeer is the listening process. It opens a shm device, listens on
// 127.0.0.1 with a random port, prints "LISTEN <port>", then plays its
// scenario.
func shmPeer(scenario string) error {
	dev, err := shm.Open(shm.Config{})
	if err != nil {
		return err
	}
	defer dev.Close()
	opts := &cm.Options{Context: dev}
	if scenario == "ud" {
		opts.QPType = verbs.QPTypeUD
	}
	ln, err := cm.Listen("rdma", "127.0.0.1:0", opts)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("LISTEN", ln.Addr().Port())
	cmds := bufio.NewScanner(os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	req, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("REQ %q\n", bytes.TrimRight(req.PrivateData, "\x00"))
	switch scenario {
	case "reject":
		return req.Reject([]byte("go away"))
	case "hold": // answer only when told, after the dialer gave up
		if !cmds.Scan() {
			return errors.New("no command")
		}
		_, err := req.Accept(ctx, nil)
		fmt.Println("ACCEPT", err)
		return nil
	case "ud":
		return shmPeerUD(ctx, dev, req)
	}
	// "accept": offer a region in the REP; the dialer WRITEs into it and
	// SENDs into the posted receive; then the command says who ends it.
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	mr, err := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	private := make([]byte, 17)
	copy(private, "world")
	binary.LittleEndian.PutUint32(private[5:], mr.RKey())
	binary.LittleEndian.PutUint64(private[9:], mr.Addr())
	c, err := req.Accept(ctx, &cm.Options{PD: pd, PrivateData: private})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.QP.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(1024, 1024)}}); err != nil {
		return err
	}
	fmt.Println("ACCEPTED")
	wc, err := waitWC(ctx, c.RecvCQ)
	if err != nil {
		return err
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("receive: %v", wc.Status)
	}
	fmt.Printf("GOT %q %q\n", mr.Bytes()[1024:1024+wc.ByteLen], bytes.TrimRight(mr.Bytes()[:64], "\x00"))
	if !cmds.Scan() {
		return errors.New("no command")
	}
	switch cmds.Text() {
	case "close":
		c.Close()
		fmt.Println("CLOSED")
	case "wait":
		select {
		case <-c.Done():
			fmt.Println("DONE", c.Err())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// shmPeerUD answers a SIDR_REQ with a UD QP whose receive is posted
// before the answer, then prints the datagram that arrives.
func shmPeerUD(ctx context.Context, dev *shm.Device, req *cm.ConnRequest) error {
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	cq, err := dev.CreateCQ(4, nil)
	if err != nil {
		return err
	}
	defer cq.Destroy()
	mr, err := pd.AllocMR(4096, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeUD,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy()
	p := cm.DefaultParams()
	p.QKey = cm.RDMAUDPQKey
	if err := cm.Init(qp, &p); err != nil {
		return err
	}
	if err := qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 4096)}}); err != nil {
		return err
	}
	c, err := req.Accept(ctx, &cm.Options{PD: pd, QP: qp, PrivateData: []byte("ud here")})
	if err != nil {
		return err
	}
	defer c.Close()
	wc, err := waitWC(ctx, cq)
	if err != nil {
		return err
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("receive: %v", wc.Status)
	}
	fmt.Printf("GOT %q from QP %d\n", mr.Bytes()[40:wc.ByteLen], wc.SrcQP)
	return nil
}

func waitWC(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil || n == 1 {
			return wc[0], err
		}
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, err
		}
	}
}

// shmPeerProc is the parent's view of the peer process.
type shmPeerProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin *os.File
	lines chan string
	port  uint16
}

// startShmPeer starts the peer in scenario and waits for its LISTEN.
func startShmPeer(t *testing.T, scenario string) *shmPeerProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), "CM_SHM_PEER="+scenario)
	cmd.Stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	p := &shmPeerProc{t: t, cmd: cmd, stdin: w, lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		w.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	port, err := strconv.ParseUint(strings.TrimPrefix(p.expect("LISTEN "), "LISTEN "), 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	p.port = uint16(port)
	return p
}

// expect returns the peer's next line, which must start with prefix.
func (p *shmPeerProc) expect(prefix string) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("the peer exited; want %q", prefix)
		}
		if !strings.HasPrefix(l, prefix) {
			p.t.Fatalf("the peer said %q; want %q", l, prefix)
		}
		return l
	case <-time.After(hang):
		p.t.Fatalf("the peer said nothing; want %q", prefix)
	}
	return ""
}

func (p *shmPeerProc) send(cmd string) { fmt.Fprintln(p.stdin, cmd) }

func (p *shmPeerProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// openShm opens a shm device for this process, detached and closed at
// the end of the test.
func openShm(t *testing.T) *shm.Device {
	t.Helper()
	dev, err := shm.Open(shm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	return dev
}

// shmDial connects to the peer's port: RC, with private data.
func shmDial(t *testing.T, dev *shm.Device, p *shmPeerProc) *cm.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := cm.Dial(ctx, "rdma", p.addr(), &cm.Options{Context: dev, PrivateData: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got := p.expect("REQ "); got != `REQ "hello"` {
		t.Errorf("the peer got %s; want the dialer's private data", got)
	}
	p.expect("ACCEPTED")
	return c
}

// sendBytes SENDs b on c's QP (wr gives the UD address) and waits for
// the completion.
func sendBytes(t *testing.T, c *cm.Conn, b []byte, wr verbs.SendWR) {
	t.Helper()
	mr, err := c.PD.AllocMR(len(b), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	copy(mr.Bytes(), b)
	wr.Opcode, wr.SendFlags, wr.SGList = verbs.WRSend, verbs.SendSignaled, []verbs.SGE{mr.SGE(0, len(b))}
	if err := c.QP.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if wc, err := waitWC(ctx, c.SendCQ); err != nil || wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion %+v, %v", wc, err)
	}
}

// TestShmConnect: Dial through cm over shm to a listener in another
// process, a WRITE into the region its REP offered and a SEND into its
// posted receive; then the listener disconnects and the dialer sees it.
func TestShmConnect(t *testing.T) {
	dev := openShm(t)
	p := startShmPeer(t, "accept")
	c := shmDial(t, dev, p)
	if !bytes.HasPrefix(c.PeerPrivateData, []byte("world")) || len(c.PeerPrivateData) < 17 {
		t.Fatalf("REP private data %q", c.PeerPrivateData)
	}
	rkey := binary.LittleEndian.Uint32(c.PeerPrivateData[5:])
	raddr := binary.LittleEndian.Uint64(c.PeerPrivateData[9:])
	if want := netip.AddrPortFrom(c.RemoteAddr().Addr(), p.port); !strings.HasPrefix(want.Addr().String(), "fd73:686d:") {
		t.Errorf("RemoteAddr %v: want the peer device's GID", c.RemoteAddr())
	}
	pd := c.PD
	mr, err := pd.AllocMR(64, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	copy(mr.Bytes(), "written by the dialer")
	copy(mr.Bytes()[32:], "sent")
	if err := c.QP.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{mr.SGE(0, 21)},
		RemoteAddr: raddr, RKey: rkey, Next: &verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{mr.SGE(32, 4)}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if wc, err := waitWC(ctx, c.SendCQ); err != nil || wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("send completion %+v, %v", wc, err)
	}
	if got := p.expect("GOT "); got != `GOT "sent" "written by the dialer"` {
		t.Errorf("the peer received %s", got)
	}
	p.send("close")
	p.expect("CLOSED")
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the listener's disconnect did not end the dialer's connection")
	}
	if !errors.Is(c.Err(), cm.ErrDisconnected) {
		t.Errorf("dialer's Err %v; want ErrDisconnected", c.Err())
	}
}

// TestShmDisconnectByDialer: the dialer's Close reaches the listener's
// connection as a disconnect.
func TestShmDisconnectByDialer(t *testing.T) {
	dev := openShm(t)
	p := startShmPeer(t, "accept")
	c := shmDial(t, dev, p)
	sendBytes(t, c, []byte("bye"), verbs.SendWR{})
	p.expect(`GOT "bye"`)
	p.send("wait")
	c.Close()
	if got := p.expect("DONE "); got != "DONE "+cm.ErrDisconnected.Error() {
		t.Errorf("the listener's connection ended with %q; want ErrDisconnected", got)
	}
}

// TestShmPeerKilled: a listener process killed after it connected ends
// the dialer's connection with ErrQPError (its QP flushed to ERR when the
// peer's socket closed).
func TestShmPeerKilled(t *testing.T) {
	dev := openShm(t)
	p := startShmPeer(t, "accept")
	c := shmDial(t, dev, p)
	if err := c.QP.PostRecv(&verbs.RecvWR{WRID: 7}); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the peer's death did not end the connection")
	}
	if !errors.Is(c.Err(), cm.ErrQPError) {
		t.Errorf("Err %v; want ErrQPError", c.Err())
	}
	if wc, err := waitWC(ctx, c.RecvCQ); err != nil || wc.WRID != 7 || wc.Status != verbs.WCWRFlushErr {
		t.Errorf("posted receive completed %+v, %v; want flushed", wc, err)
	}
	// The dead device is unreachable, at once.
	_, err := cm.Dial(ctx, "rdma", netip.AddrPortFrom(c.RemoteAddr().Addr(), p.port).String(), &cm.Options{Context: dev})
	if !errors.Is(err, verbs.ErrUnreachable) {
		t.Errorf("Dial to the dead device's GID: %v; want verbs.ErrUnreachable", err)
	}
}

// TestShmReject: a listener's Reject reaches the dialer as a REJ
// "consumer defined" with its private data.
func TestShmReject(t *testing.T) {
	dev := openShm(t)
	p := startShmPeer(t, "reject")
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	_, err := cm.Dial(ctx, "rdma", p.addr(), &cm.Options{Context: dev, PrivateData: []byte("let me in")})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || rej.Reason != wire.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("Dial: %v; want a consumer-defined REJ with the listener's private data", err)
	}
	p.expect(`REQ "let me in"`)
}

// TestShmNoListener: a port nobody listens on is refused as over a wire
// (REJ "invalid service ID", SIDR "unsupported service"), an address of
// another host is an error.
func TestShmNoListener(t *testing.T) {
	dev := openShm(t)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	ln, err := cm.Listen("rdma", "127.0.0.1:0", &cm.Options{Context: dev})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr()
	if addr.Addr() != dev.GID().Addr() {
		t.Errorf("Listener.Addr %v: want the device's GID %v", addr, dev.GID().Addr())
	}
	ln.Close() // the service is free again: nobody listens
	to := fmt.Sprintf("127.0.0.1:%d", addr.Port())
	_, err = cm.Dial(ctx, "rdma", to, &cm.Options{Context: dev})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || rej.Reason != wire.RejInvalidServiceID {
		t.Errorf("RC Dial to a closed port: %v; want REJ invalid service ID", err)
	}
	_, err = cm.Dial(ctx, "rdma", to, &cm.Options{Context: dev, QPType: verbs.QPTypeUD})
	var sidr *cm.SIDRError
	if !errors.As(err, &sidr) || sidr.Status != wire.SIDRUnsupportedService {
		t.Errorf("UD Dial to a closed port: %v; want SIDR unsupported service", err)
	}
	_, err = cm.Dial(ctx, "rdma", "192.0.2.1:7471", &cm.Options{Context: dev})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("Dial to another host's address: %v; want ErrInvalidArgument", err)
	}
}

// TestShmDialCanceled: a Dial whose context ends while the listener has
// not answered returns the context's error and withdraws the request: the
// listener's late Accept is refused.
func TestShmDialCanceled(t *testing.T) {
	dev := openShm(t)
	p := startShmPeer(t, "hold")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cm.Dial(ctx, "rdma", p.addr(), &cm.Options{Context: dev})
		done <- err
	}()
	p.expect("REQ ")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial: %v; want context.Canceled", err)
	}
	p.send("accept")
	if got := p.expect("ACCEPT "); !strings.Contains(got, "rejected") {
		t.Errorf("the listener's late Accept: %q; want it rejected", got)
	}
}

// TestShmUD: a UD Dial resolves the listener's QPN and Q_Key through
// SIDR over shm, and a datagram to them arrives.
func TestShmUD(t *testing.T) {
	dev := openShm(t)
	p := startShmPeer(t, "ud")
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := cm.Dial(ctx, "rdma", p.addr(), &cm.Options{Context: dev, QPType: verbs.QPTypeUD, PrivateData: []byte("sidr")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.expect(`REQ "sidr"`)
	if !bytes.HasPrefix(c.PeerPrivateData, []byte("ud here")) || c.RemoteQKey != cm.RDMAUDPQKey {
		t.Errorf("SIDR_REP: private data %q, Q_Key %#x", c.PeerPrivateData, c.RemoteQKey)
	}
	sendBytes(t, c, []byte("datagram"), verbs.SendWR{AH: c.AH, RemoteQPN: c.RemoteQPN, RemoteQKey: c.RemoteQKey})
	if got, want := p.expect("GOT "), fmt.Sprintf(`GOT "datagram" from QP %d`, c.QP.QPNum()); got != want {
		t.Errorf("the peer got %s; want %s", got, want)
	}
}

// TestShmPeerKilledWhileDialing: a listener killed after the REQ reached
// it, before it answered, fails the Dial with ErrUnreachable at the REQ's
// next resend (about 6 s: rdma_cm's timeout), where a wire would resend
// for more than a minute.
func TestShmPeerKilledWhileDialing(t *testing.T) {
	t.Parallel()
	dev := openShm(t)
	p := startShmPeer(t, "hold")
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cm.Dial(ctx, "rdma", p.addr(), &cm.Options{Context: dev})
		done <- err
	}()
	p.expect("REQ ")
	p.cmd.Process.Signal(syscall.SIGKILL)
	if err := <-done; !errors.Is(err, cm.ErrUnreachable) {
		t.Fatalf("Dial: %v; want ErrUnreachable", err)
	}
}
