package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPingpongTools runs each pingpong tool as server and client, two
// processes on two loopback addresses, as a user would.
func TestPingpongTools(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and runs processes")
	}
	bin := buildCLI(t)
	k := os.Getpid()%200 + 20
	for i, tool := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"} {
		t.Run(tool, func(t *testing.T) {
			srvAddr := fmt.Sprintf("127.%d.%d.1", k, 30+i)
			cliAddr := fmt.Sprintf("127.%d.%d.2", k, 30+i)
			port := fmt.Sprint(21000 + os.Getpid()%10000 + i)
			args := []string{tool, "-g", "1", "-n", "50", "-p", port}
			switch tool {
			case "ibv_ud_pingpong":
				args = append(args, "-s", "1024")
			case "ibv_srq_pingpong":
				args = append(args, "-q", "4")
			}
			server := exec.Command(bin, args...)
			server.Env = append(os.Environ(), "SOFTRDMA_ADDR="+srvAddr)
			var sout bytes.Buffer
			server.Stdout, server.Stderr = &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			defer server.Process.Kill()
			var cout []byte
			var err error
			for try := 0; try < 20; try++ {
				client := exec.Command(bin, append(args, srvAddr)...)
				client.Env = append(os.Environ(), "SOFTRDMA_ADDR="+cliAddr)
				cout, err = client.CombinedOutput()
				if err == nil || !strings.Contains(string(cout), "connect") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			serr := server.Wait()
			t.Logf("server:\n%s\nclient:\n%s", sout.String(), cout)
			if err != nil || serr != nil {
				t.Fatalf("client: %v, server: %v", err, serr)
			}
			for _, out := range []string{sout.String(), string(cout)} {
				if !strings.Contains(out, "50 iters in") || !strings.Contains(out, "remote address:") {
					t.Fatalf("missing result lines in:\n%s", out)
				}
			}
		})
	}
}

var cli struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// buildCLI builds this command once per test binary, for the tests that
// run it as separate processes, and returns the executable's path.
func buildCLI(t *testing.T) string {
	t.Helper()
	cli.once.Do(func() {
		cli.dir, cli.err = os.MkdirTemp("", "softrdma-cli")
		if cli.err == nil {
			cli.out, cli.err = exec.Command("go", "build", "-o", filepath.Join(cli.dir, "softrdma"), ".").CombinedOutput()
		}
	})
	if cli.err != nil {
		t.Fatalf("build: %v\n%s", cli.err, cli.out)
	}
	return filepath.Join(cli.dir, "softrdma")
}

// TestMain removes buildCLI's executable after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if cli.dir != "" {
		os.RemoveAll(cli.dir)
	}
	os.Exit(code)
}
