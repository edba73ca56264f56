package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/reuseport"
)

// needSharing skips when this machine cannot share an address between
// processes (not root, no bpffs); CI must be able to.
func needSharing(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the CLI and runs processes")
	}
	s, err := reuseport.Prepare([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:4791")})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI must be able to share addresses (root, bpffs at /sys/fs/bpf): %v", err)
		}
		t.Skipf("cannot share addresses here: %v", err)
	}
	s.Close()
}

// TestSharedAddress runs the tools' server and client as two processes
// with devices on one address, as users of Linux rxe do: every packet,
// connection-manager MADs included, must reach the process that owns its
// QP, connection or listener.
func TestSharedAddress(t *testing.T) {
	needSharing(t)
	bin := buildCLI(t)
	addr := fmt.Sprintf("127.%d.40.1", os.Getpid()%200+20)
	port := 23000 + os.Getpid()%10000
	// A case without client arguments runs the server's with the
	// server's address last, as perftest and rdma-core's tools take it.
	cases := []struct {
		name           string
		server, client []string
		serverOK, clOK string // in the outputs of a run that worked
	}{
		{name: "rc_pingpong", server: []string{"ibv_rc_pingpong", "-g", "1", "-n", "200"}, serverOK: "200 iters in", clOK: "200 iters in"},
		{name: "ud_pingpong", server: []string{"ibv_ud_pingpong", "-g", "1", "-n", "200", "-s", "1024"}, serverOK: "200 iters in", clOK: "200 iters in"},
		{name: "ib_write_bw-R", server: []string{"ib_write_bw", "-R", "-n", "500"}, serverOK: "BW average", clOK: "BW average"},
		{name: "ib_send_lat-R", server: []string{"ib_send_lat", "-R", "-n", "500"}, serverOK: "t_avg", clOK: "t_avg"},
		{name: "ib_read_lat", server: []string{"ib_read_lat", "-n", "500"}, serverOK: "remote address", clOK: "t_avg"},
		{name: "rping", server: []string{"rping", "-s", "-a", addr, "-C", "5"}, client: []string{"rping", "-c", "-a", addr, "-C", "5", "-v"}, serverOK: "DISCONNECT", clOK: "rdma-ping-4"},
		{name: "ucmatose", server: []string{"ucmatose", "-b", addr, "-c", "3"}, client: []string{"ucmatose", "-s", addr, "-b", addr, "-c", "3"}, serverOK: "test complete", clOK: "test complete"},
		{name: "udaddy", server: []string{"udaddy", "-b", addr}, client: []string{"udaddy", "-s", addr, "-b", addr}, serverOK: "test complete", clOK: "test complete"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := fmt.Sprint(port + i)
			srvArgs, cliArgs := append([]string(nil), c.server...), append([]string(nil), c.client...)
			srvArgs = append(srvArgs, "-p", p)
			if cliArgs == nil {
				cliArgs = append(append([]string(nil), srvArgs...), addr)
			} else {
				cliArgs = append(cliArgs, "-p", p)
			}
			env := append(os.Environ(), "SOFTRDMA_ADDR="+addr)
			server := exec.Command(bin, srvArgs...)
			server.Env = env
			var sout bytes.Buffer
			server.Stdout, server.Stderr = &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			defer server.Process.Kill()
			var cout []byte
			var err error
			// Every attempt ends by one deadline: a client that hangs (its
			// packets reach the wrong process) fails the case.
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				client := exec.CommandContext(ctx, bin, cliArgs...)
				client.Env = env
				cout, err = client.CombinedOutput()
				cancel()
				if err == nil || !refused(string(cout)) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			serr := waitTimeout(server, 5*time.Second)
			if err != nil || serr != nil || !strings.Contains(sout.String(), c.serverOK) || !strings.Contains(string(cout), c.clOK) {
				t.Fatalf("client: %v, server: %v\nserver:\n%s\nclient:\n%s", err, serr, sout.String(), cout)
			}
		})
	}
}

// refused says whether a client failed only because its server was not
// listening yet.
func refused(out string) bool {
	for _, s := range []string{"connect", "refused", "REJ", "rejected", "unreachable"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// waitTimeout waits for cmd, killing it after d.
func waitTimeout(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %v: killed", d)
	}
}

// TestSharedAddressKill: two servers share an address; one is killed
// while both carry RC traffic. The survivor's traffic goes on to the
// end; the killed one's client fails (its QPNs find no socket: no
// packet reaches the survivor by mistake) instead of hanging.
//
// Every step waits for the event it needs, not for a time that a loaded
// machine may exceed: the clients start once their servers listen, the
// kill comes once both pairs have connected their QPs (the tool prints
// the remote address right before its first SEND), and the survivor's
// iterations fit its 60 s even at the 5 ms a round trip can take when
// busy loops hold both CPUs.
func TestSharedAddressKill(t *testing.T) {
	needSharing(t)
	bin := buildCLI(t)
	k := os.Getpid()%200 + 20
	shared := fmt.Sprintf("127.%d.41.1", k)
	clientAddr := fmt.Sprintf("127.%d.41.2", k)
	port := 24000 + os.Getpid()%10000
	const iters = "2000"
	start := func(env string, args ...string) (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "SOFTRDMA_ADDR="+env)
		out := new(syncBuffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, out
	}
	var servers, clients [2]*exec.Cmd
	var souts, couts [2]*syncBuffer
	for i := range 2 {
		servers[i], souts[i] = start(shared, "ibv_rc_pingpong", "-g", "1", "-n", iters, "-p", fmt.Sprint(port+i))
	}
	for i := range 2 {
		// The servers listen on TCP for the exchange.
		waitFor(t, fmt.Sprintf("server %d listening on TCP port %d", i, port+i), 30*time.Second, func() bool { return tcpListening(port + i) })
	}
	for i := range 2 {
		clients[i], couts[i] = start(clientAddr, "ibv_rc_pingpong", "-g", "1", "-n", iters, "-p", fmt.Sprint(port+i), shared)
	}
	for i := range 2 {
		waitFor(t, fmt.Sprintf("client %d connected", i), 30*time.Second, func() bool { return strings.Contains(couts[i].String(), "remote address:") })
	}
	if err := servers[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	servers[0].Wait()
	if clients[1].ProcessState != nil {
		t.Log("the survivor's client had finished before the kill: the machine is fast; the case still checks the killed one")
	}
	if err := waitTimeout(clients[1], 60*time.Second); err != nil {
		t.Fatalf("the survivor's client: %v\n%s\nits server:\n%s", err, couts[1], souts[1])
	}
	if err := waitTimeout(servers[1], 10*time.Second); err != nil || !strings.Contains(souts[1].String(), iters+" iters in") {
		t.Fatalf("the survivor: %v\n%s", err, souts[1])
	}
	err := waitTimeout(clients[0], 60*time.Second)
	if err == nil {
		t.Fatalf("the killed server's client finished without its server:\n%s", couts[0])
	}
	if strings.Contains(err.Error(), "killed") {
		t.Fatalf("the killed server's client hung instead of failing: %v\n%s", err, couts[0])
	}
	t.Logf("the killed server's client failed as it should: %v\n%s", err, lastLines(couts[0].String(), 3))
}

// syncBuffer is a bytes.Buffer that a process's output goroutine writes
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s after %v", what, d)
		}
	}
}

// tcpListening reports whether a socket of this network namespace listens
// on TCP port (IPv4 or IPv6), from /proc/net/tcp{,6}: without connecting,
// which a server that takes one connection would count as its client.
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
