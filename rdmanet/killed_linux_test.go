package rdmanet

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// killedPeerEnv, set, makes TestKilledPeerChild the client of
// TestKilledPeer: "server-ip port" of the server.
const killedPeerEnv = "SOFTRDMA_TEST_KILLED_PEER"

// TestKilledPeerChild is the process TestKilledPeer kills: it opens a
// device, connects with cm and with rdmanet, says so, and waits.
func TestKilledPeerChild(t *testing.T) {
	arg := os.Getenv(killedPeerEnv)
	if arg == "" {
		t.Skip("the child of TestKilledPeer")
	}
	var srv string
	var port int
	for i := range arg {
		if arg[i] == ' ' {
			srv, port = arg[:i], must2(strconv.Atoi(arg[i+1:]))
		}
	}
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.72.2"), Port: uint16(port)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cm.Dial(ctx, "rdma", srv+":7001", &cm.Options{Context: dev}); err != nil {
		t.Fatal(err)
	}
	d := Dialer{Config: &Config{Context: dev}}
	if _, err := d.Dial("rdma", srv+":7002"); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("connected\n")
	time.Sleep(time.Hour)
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestKilledPeer: a client process killed with SIGKILL while its
// connections are idle sends no DREQ; the server's keepalive probes find
// it gone within the default bound (30 s): cm's Conn.Done fires with
// ErrQPError, the QP raises QP_FATAL, and a blocked rdmanet Read fails.
func TestKilledPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the default keepalive bound, up to 30 s")
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.72.1")})
	if err != nil {
		t.Skip(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.72.1"), Port: uint16(port)})
	if err != nil {
		t.Skip(err)
	}
	defer func() { cm.Detach(dev); dev.Close() }()
	cl, err := cm.Listen("rdma", "127.0.72.1:7001", &cm.Options{Context: dev})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rl, err := ListenConfig("rdma", "127.0.72.1:7002", &Config{Context: dev})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()

	child := exec.Command(os.Args[0], "-test.run=^TestKilledPeerChild$")
	child.Env = append(os.Environ(), killedPeerEnv+"=127.0.72.1 "+strconv.Itoa(port))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := cl.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := req.Accept(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := rl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "connected\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := rc.Read(make([]byte, 16))
		readErr <- err
	}()

	if err := child.Process.Kill(); err != nil { // SIGKILL: no DREQ
		t.Fatal(err)
	}
	child.Wait()
	killed := time.Now()
	// The default keepalive, then 1 + 7 retries of the probe at cm's
	// local ACK timeout (code 19) with up to a quarter of jitter, then
	// cm's once-a-second look at the QP state.
	bound := roce.DefaultKeepalive + 8*(4096*time.Nanosecond<<19)*5/4 + time.Second
	if bound > 30*time.Second {
		t.Fatalf("the default detection bound %v exceeds 30 s", bound)
	}
	select {
	case <-conn.Done():
	case <-time.After(bound):
		t.Fatalf("server's cm connection still up %v after the client was killed", bound)
	}
	if !errors.Is(conn.Err(), cm.ErrQPError) {
		t.Errorf("Err %v, want cm.ErrQPError", conn.Err())
	}
	t.Logf("dead peer found after %v (bound %v)", time.Since(killed).Round(time.Millisecond), bound)
	select {
	case err := <-readErr:
		var oe *net.OpError
		if err == nil || !errors.As(err, &oe) {
			t.Errorf("rdmanet Read after the peer died: %v, want a *net.OpError", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("rdmanet Read still blocked after the peer was found dead")
	}
	for {
		select {
		case ev := <-dev.AsyncEvents():
			if ev.Type == verbs.EventQPFatal && ev.QP == conn.QP {
				return
			}
			continue
		default:
		}
		t.Error("no QP_FATAL event for the connection's QP")
		return
	}
}
