package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoProcesses builds the example and runs it as the README says: a
// server and a client in two processes, each with its own device.
func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two processes")
	}
	bin := filepath.Join(t.TempDir(), "writeread")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := os.Getpid()%200 + 20
	tcp := fmt.Sprintf("127.0.0.1:%d", 20000+os.Getpid()%20000)
	srvAddr, cliAddr := fmt.Sprintf("127.%d.9.2", k), fmt.Sprintf("127.%d.9.3", k)
	server := exec.CommandContext(ctx, bin, "-listen", tcp, "-addr", srvAddr)
	var sout strings.Builder
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	cout, cerr := exec.CommandContext(ctx, bin, "-connect", tcp, "-addr", cliAddr).CombinedOutput()
	serr := server.Wait()
	t.Logf("server:\n%s\nclient:\n%s", sout.String(), cout)
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v, server: %v", cerr, serr)
	}
	if !strings.Contains(string(cout), "RDMA READ of 65536 bytes verified") || !strings.Contains(sout.String(), "verified 65536 bytes") {
		t.Fatal("the processes did not both verify their data")
	}
}
