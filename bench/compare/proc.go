//go:build linux

package main

// Child processes: every tool the harness runs is started in its own process
// group with a deadline, tracked in a registry, and killed (the whole group)
// when it overstays, when the harness is interrupted, and when it exits.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// outBuf collects a child's combined stdout and stderr.
type outBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const maxOut = 1 << 20 // keep at most this much of a child's output

func (b *outBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() < maxOut {
		b.buf.Write(p)
	}
	return len(p), nil
}

func (b *outBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// child is one running tool.
type child struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *outBuf
	done chan struct{}
	err  error // valid once done is closed
	dur  time.Duration
}

var (
	childMu  sync.Mutex
	children = map[*child]bool{}
)

// killGroup kills a child's whole process group.
func killGroup(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	// Negative pid: the group (Setpgid made the child its leader).
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	_ = c.Process.Kill()
}

// killAll kills every child still running.
func killAll() {
	childMu.Lock()
	defer childMu.Unlock()
	for c := range children {
		killGroup(c.cmd)
	}
}

// handleSignals kills the children and exits when the harness is interrupted.
func handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "\ncompare: %v: killing child processes\n", s)
		killAll()
		os.Exit(130)
	}()
}

// start runs name with args and extra environment variables; the child is
// killed when timeout passes or ctx ends.
func start(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) (*child, error) {
	return startDir(ctx, timeout, "", env, name, args...)
}

// startDir is start in directory dir.
func startDir(ctx context.Context, timeout time.Duration, dir string, env []string, name string, args ...string) (*child, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { killGroup(cmd); return nil }
	cmd.WaitDelay = 2 * time.Second
	out := &outBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	c := &child{name: name, args: args, cmd: cmd, out: out, done: make(chan struct{})}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	childMu.Lock()
	children[c] = true
	childMu.Unlock()
	go func() {
		err := cmd.Wait()
		c.dur = time.Since(t0)
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("killed after the %v timeout", timeout)
		}
		cancel()
		killGroup(cmd) // anything the child left behind in its group
		childMu.Lock()
		delete(children, c)
		childMu.Unlock()
		c.err = err
		close(c.done)
	}()
	return c, nil
}

// childCPU is the CPU time (user and system) of every child process the
// harness has waited for so far, their own children included
// (RUSAGE_CHILDREN).
func childCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// addCPU records in m the CPU time a measurement's processes used, and
// per GB moved and per million messages where m has a bandwidth or a
// message rate. The amounts moved are the rate times secs, the whole
// measurement's wall time: setup (connection, registration) counts in
// both, so the figures slightly favour short setups.
func addCPU(m metrics, cpu time.Duration, secs float64) {
	if m == nil || cpu <= 0 || secs <= 0 {
		return
	}
	c := cpu.Seconds()
	m["cpu_s"] = c
	if bw := m["bw_MiBps"]; bw > 0 {
		m["cpu_s_per_GB"] = c / (bw * (1 << 20) * secs / 1e9)
	}
	if r := m["msg_rate_M"]; r > 0 {
		m["cpu_s_per_Mmsg"] = c / (r * secs)
	}
}

// wait waits for the child to end, at most d; after that it is killed.
func (c *child) wait(d time.Duration) error {
	select {
	case <-c.done:
	case <-time.After(d):
		killGroup(c.cmd)
		<-c.done
		if c.err == nil {
			return fmt.Errorf("still running %v after its peer ended; killed", d)
		}
		return fmt.Errorf("still running %v after its peer ended; killed (%v)", d, c.err)
	}
	return c.err
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// cmdline renders the child's command line for messages and the JSON.
func (c *child) cmdline() string {
	return strings.Join(append([]string{c.name}, c.args...), " ")
}

// tail returns the last n lines of the child's output, for error messages.
func (c *child) tail(n int) string { return tailLines(c.out.String(), n) }

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitListen waits until some process listens on TCP port (seen in
// /proc/net/tcp{,6}) — without connecting, which would use up a server's
// only accept — or until srv exits or d passes.
func waitListen(srv *child, port int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if listening(port) {
			return nil
		}
		if srv.exited() {
			return fmt.Errorf("server exited before listening on port %d (%v):\n%s", port, srv.err, indent(srv.tail(8)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not listening on TCP port %d after %v:\n%s", port, d, indent(srv.tail(8)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func listening(port int) bool {
	hexPort := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) > 3 && strings.HasSuffix(fields[1], hexPort) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// waitOutput waits until the child's output contains s.
func waitOutput(c *child, s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if strings.Contains(c.out.String(), s) {
			return nil
		}
		if c.exited() {
			return fmt.Errorf("%s exited before printing %q (%v):\n%s", c.name, s, c.err, indent(c.tail(8)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not print %q within %v:\n%s", c.name, s, d, indent(c.tail(8)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a TCP port that is free on the loopback addresses now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func indent(s string) string {
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// pairSpec describes a server/client run.
type pairSpec struct {
	env       []string // for both
	srvEnv    []string
	cliEnv    []string
	srvName   string
	srvArgs   []string
	cliName   string
	cliArgs   []string
	port      int    // TCP port the server listens on, 0: use ready
	ready     string // output line that says the server is ready
	serverOut bool   // parse the server's output rather than the client's
	// pin runs the server on CPU 0 and the client on CPU 1 (taskset).
	pin bool
}

// pinned returns name and args run on CPU cpu with taskset, if pin.
func pinned(pin bool, cpu int, name string, args []string) (string, []string) {
	if !pin {
		return name, args
	}
	return "taskset", append([]string{"-c", itoa(cpu), name}, args...)
}

// pairResult is what a pair run leaves behind.
type pairResult struct {
	cliOut, srvOut string
	cliCmd, srvCmd string
	dur            time.Duration
}

// runPair starts the server, waits until it is ready, runs the client and
// waits for both. Both are killed at timeout; the server also a few seconds
// after the client ends.
func runPair(ctx context.Context, timeout time.Duration, p pairSpec) (pairResult, error) {
	var r pairResult
	p.srvEnv, p.cliEnv = profileEnv(p, p.srvEnv, "srv"), profileEnv(p, p.cliEnv, "cli")
	srvName, srvArgs := pinned(p.pin, 0, p.srvName, p.srvArgs)
	cliName, cliArgs := pinned(p.pin, 1, p.cliName, p.cliArgs)
	srv, err := start(ctx, timeout, append(append([]string{}, p.env...), p.srvEnv...), srvName, srvArgs...)
	if err != nil {
		return r, err
	}
	defer killGroup(srv.cmd)
	r.srvCmd = srv.cmdline()
	if p.port != 0 {
		err = waitListen(srv, p.port, 15*time.Second)
	} else {
		err = waitOutput(srv, p.ready, 15*time.Second)
	}
	if err != nil {
		return r, err
	}
	cli, err := start(ctx, timeout, append(append([]string{}, p.env...), p.cliEnv...), cliName, cliArgs...)
	if err != nil {
		return r, err
	}
	r.cliCmd = cli.cmdline()
	<-cli.done
	r.dur = cli.dur
	r.cliOut = cli.out.String()
	cerr := cli.err
	serr := srv.wait(5 * time.Second)
	r.srvOut = srv.out.String()
	switch {
	case cerr != nil:
		st := "server said"
		if serr != nil {
			st = fmt.Sprintf("server (%v) said", serr)
		}
		return r, fmt.Errorf("client failed (%v):\n  $ %s\n%s\n  %s:\n%s", cerr, r.cliCmd, indent(tailLines(r.cliOut, 8)), st, indent(tailLines(r.srvOut, 6)))
	case serr != nil:
		return r, fmt.Errorf("server failed (%v):\n  $ %s\n%s", serr, r.srvCmd, indent(tailLines(r.srvOut, 8)))
	}
	return r, nil
}

// profileDir, when set (-profile-dir), is where every pair's processes
// write a CPU profile and a runtime trace; profileSeq numbers the pairs.
var (
	profileDir string
	profileSeq atomic.Int64
)

// profileEnv adds to env the variables that make one side of p write its
// CPU profile and trace into profileDir (the softrdma CLI and the Go
// loops read them; other programs ignore them). Files are named by the
// pair's number, program, test, device (-d: shm0 for the shm stack) and
// size, so a run's files sort in the order it ran them:
// 0042-softrdma-ib_write_bw-8-cli.pprof, 0057-softrdma-ib_write_lat-shm0-8-cli.pprof.
func profileEnv(p pairSpec, env []string, side string) []string {
	if profileDir == "" {
		return env
	}
	if side == "srv" {
		profileSeq.Add(1)
	}
	name := []string{fmt.Sprintf("%04d", profileSeq.Load()), filepath.Base(p.srvName)}
	for i, a := range p.srvArgs {
		switch {
		case i == 0 && a == "_go-server": // the program says it: compare, grpc
		case i == 0 && !strings.HasPrefix(a, "-"):
			name = append(name, a)
		case (a == "-s" || a == "-proto" || a == "-mode" || a == "-d") && i+1 < len(p.srvArgs):
			name = append(name, p.srvArgs[i+1])
		}
	}
	base := filepath.Join(profileDir, strings.Join(append(name, side), "-"))
	return append(append([]string{}, env...), "SOFTRDMA_CPUPROFILE="+base+".pprof", "SOFTRDMA_TRACE="+base+".trace")
}

// runOne runs a single command to completion.
func runOne(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	c, err := start(ctx, timeout, env, name, args...)
	if err != nil {
		return "", err
	}
	<-c.done
	out := c.out.String()
	if c.err != nil {
		var ee *exec.ExitError
		if errors.As(c.err, &ee) {
			return out, fmt.Errorf("%s: exit status %d:\n%s", c.cmdline(), ee.ExitCode(), indent(tailLines(out, 10)))
		}
		return out, fmt.Errorf("%s: %v:\n%s", c.cmdline(), c.err, indent(tailLines(out, 10)))
	}
	return out, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// sysProcAttr puts a child in its own process group (so the harness can kill
// everything it started) and has the kernel kill it if the harness dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
