package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServersWithoutAddress: the librdmacm-style servers started without
// a bind address listen on every device, as their rdma-core namesakes
// do, and a client reaches them on loopback. They run in a network
// namespace of their own (root and unshare(1) needed), so the devices
// they open for the host's interfaces are that namespace's loopback only.
func TestServersWithoutAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	for _, tool := range []string{"unshare", "ip", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	if out, err := exec.Command("unshare", "-n", "true").CombinedOutput(); err != nil {
		t.Skipf("no network namespace: %v %s", err, out)
	}
	bin := buildCLI(t)
	const script = `
set -e
ip link set lo up
B=$0
pair() { # server args; client args
	$B $1 > "$T/server.out" 2>&1 & S=$!
	sleep 0.5
	timeout 30 $B $2 > "$T/client.out" 2>&1 || { echo "client $2 failed:"; cat "$T/client.out"; echo "server:"; cat "$T/server.out"; kill $S; exit 1; }
	wait $S || { echo "server $1 failed:"; cat "$T/server.out"; exit 1; }
	echo "ok: $1"
}
pair "rstream -S 65536 -C 50" "rstream -s 127.0.0.1 -b 127.0.0.2 -S 65536 -C 50"
pair "rping -s -C 2" "rping -c -a 127.0.0.1 -I 127.0.0.2 -C 2"
pair "ucmatose" "ucmatose -s 127.0.0.1 -b 127.0.0.2"
pair "udaddy" "udaddy -s 127.0.0.1 -b 127.0.0.2"
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-n", "sh", "-c", script, bin)
	cmd.Env = append(os.Environ(), "T="+t.TempDir(), "SOFTRDMA_ADDR=", "SOFTRDMA_DEVICE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if n := strings.Count(string(out), "ok: "); n != 4 {
		t.Fatalf("%d of 4 servers ran:\n%s", n, out)
	}
}
