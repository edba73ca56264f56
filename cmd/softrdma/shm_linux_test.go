package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestShmTools runs the perftest and pingpong tools over the shared-memory
// provider as a user would: `-d shm0`, server and client in two processes
// meeting over TCP on loopback, the exchange carrying the shm GIDs
// (index 0) that name each process's device.
func TestShmTools(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and runs processes")
	}
	bin := buildCLI(t)
	shmGID := "253:115:104:109:" // perftest prints GIDs byte by byte: fd73:686d...
	for i, tc := range []struct {
		tool   string
		args   []string
		result string // a line both sides print once the test ran
	}{
		{"ib_write_lat", []string{"-s", "8"}, " 8       200 "},
		{"ib_write_bw", []string{"-s", "65536"}, " 65536      200 "},
		{"ib_read_lat", []string{"-s", "8"}, " 8       200 "},
		{"ib_read_bw", []string{"-s", "4096"}, " 4096       200 "},
		{"ib_send_lat", []string{"-s", "8"}, " 8       200 "},
		{"ib_send_bw", []string{"-s", "8"}, " 8          200 "},
		{"ib_atomic_lat", nil, " 8       200 "},
		{"ib_atomic_bw", nil, " 8          200 "},
		{"ibv_rc_pingpong", []string{"-s", "64"}, "200 iters in"},
		{"ibv_srq_pingpong", []string{"-q", "4"}, "200 iters in"},
		{"ibv_ud_pingpong", []string{"-s", "1024"}, "200 iters in"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			port := fmt.Sprint(23000 + os.Getpid()%10000 + i)
			args := append([]string{tc.tool, "-d", "shm0", "-n", "200", "-p", port}, tc.args...)
			server := exec.Command(bin, args...)
			var sout bytes.Buffer
			server.Stdout, server.Stderr = &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			defer server.Process.Kill()
			cout, err := runClient(bin, append(args, "127.0.0.1"), nil)
			serr := server.Wait()
			t.Logf("server:\n%s\nclient:\n%s", sout.String(), cout)
			if err != nil || serr != nil {
				t.Fatalf("client: %v, server: %v", err, serr)
			}
			if !strings.Contains(string(cout), tc.result) {
				t.Errorf("client printed no result line %q", tc.result)
			}
			if strings.HasPrefix(tc.tool, "ib_") {
				for _, out := range []string{sout.String(), string(cout)} {
					if n := strings.Count(out, "GID: "+shmGID); n != 2 {
						t.Errorf("want local and remote shm GIDs in the exchange, found %d", n)
					}
				}
			} else if n := strings.Count(string(cout), "GID fd73:686d:"); n < 2 {
				t.Errorf("want local and remote shm GIDs in the exchange, found %d", n)
			}
		})
	}
}

// TestShmToolsCM runs the tools that connect through rdma_cm over shared
// memory: perftest's -R (RC, and UD through SIDR) with -d shm0, and
// ucmatose, udaddy, rping and rstream (over rdmanet) with
// SOFTRDMA_DEVICE=shm0; the client names the
// host, and cm finds the server's process by the port.
func TestShmToolsCM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and runs processes")
	}
	bin := buildCLI(t)
	shmEnv := []string{"SOFTRDMA_DEVICE=shm0"}
	for i, tc := range []struct {
		name         string
		server, cli  []string // the client's arguments end with the host
		env          []string
		result, sres string // what the client and the server print when the test ran
	}{
		{"ib_write_bw -R", []string{"ib_write_bw", "-d", "shm0", "-R", "-n", "200", "-s", "65536"}, []string{"127.0.0.1"}, nil, " 65536      200 ", " 65536      200 "},
		{"ib_send_lat -R -c UD", []string{"ib_send_lat", "-d", "shm0", "-R", "-c", "UD", "-n", "200"}, []string{"127.0.0.1"}, nil, " 2       200 ", " 2       200 "},
		{"ucmatose", []string{"ucmatose", "-c", "2"}, []string{"-c", "2", "-s", "127.0.0.1"}, shmEnv, "return status 0", "return status 0"},
		{"udaddy", []string{"udaddy"}, []string{"-s", "127.0.0.1"}, shmEnv, "return status 0", "return status 0"},
		{"rstream", []string{"rstream", "-S", "65536", "-C", "100"}, []string{"-s", "127.0.0.1"}, shmEnv, "custom    64k     100 ", "custom    64k     100 "},
		{"rping", []string{"rping", "-s", "-C", "20"}, []string{"rping", "-c", "-C", "20", "-V", "-v", "-a", "127.0.0.1"}, shmEnv, "ping data: rdma-ping-19: ", "server DISCONNECT EVENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := fmt.Sprint(25000 + os.Getpid()%10000 + i)
			sargs := append(append([]string{}, tc.server...), "-p", port)
			cargs := append(append([]string{}, tc.server...), "-p", port)
			cargs = append(cargs, tc.cli...)
			if tc.name == "rping" {
				cargs = append(append([]string{}, tc.cli...), "-p", port)
			}
			server := exec.Command(bin, sargs...)
			server.Env = append(os.Environ(), tc.env...)
			var sout bytes.Buffer
			server.Stdout, server.Stderr = &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			defer server.Process.Kill()
			cout, err := runClient(bin, cargs, tc.env)
			serr := server.Wait()
			t.Logf("server:\n%s\nclient:\n%s", sout.String(), cout)
			if err != nil || serr != nil {
				t.Fatalf("client: %v, server: %v", err, serr)
			}
			if !strings.Contains(string(cout), tc.result) {
				t.Errorf("client printed no %q", tc.result)
			}
			if !strings.Contains(sout.String(), tc.sres) {
				t.Errorf("server printed no %q", tc.sres)
			}
		})
	}
}

// runClient runs a tool's client, retrying while the server is not yet
// listening.
func runClient(bin string, args, env []string) ([]byte, error) {
	var out []byte
	var err error
	for try := 0; try < 20; try++ {
		client := exec.Command(bin, args...)
		client.Env = append(os.Environ(), env...)
		out, err = client.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "connect") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out, err
}
