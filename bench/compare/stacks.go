//go:build linux

package main

// The stacks: how each one is prepared (built, installed, probed) and how one
// measurement of it is run as two processes.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// runInfo records what a measurement ran and the output line it read.
type runInfo struct {
	Cmds []string `json:"cmds"`
	Raw  string   `json:"raw"`
}

// ---- softrdma ----------------------------------------------------------

type softrdma struct {
	bin              string
	srvAddr, cliAddr string
	twoProc          bool // perftest-compatible commands (else `softrdma bench`)
	tmp              string
	timeout          time.Duration
	pinShm           bool     // shm runs: server on CPU 0, client on CPU 1
	env              []string // extra environment of every softrdma process (-softrdma-env)
}

// buildSoftrdma builds the CLI once into dir.
func buildSoftrdma(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out, err := runOne(ctx, 10*time.Second, nil, goBin, "env", "GOMOD")
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(out)
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the softrdma module: run from the repository (go run ./bench/compare)")
	}
	bin := filepath.Join(dir, "softrdma")
	c, err := startDir(ctx, 10*time.Minute, filepath.Dir(gomod), nil, goBin, "build", "-o", bin, "./cmd/softrdma")
	if err != nil {
		return "", err
	}
	<-c.done
	if c.err != nil {
		return "", fmt.Errorf("go build ./cmd/softrdma: %v\n%s", c.err, indent(c.tail(20)))
	}
	return bin, nil
}

// buildGRPC builds bench/grpc (the gRPC row; a module of its own, so
// that gRPC stays out of softrdma's go.mod) into dir.
func buildGRPC(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out, err := runOne(ctx, 10*time.Second, nil, goBin, "env", "GOMOD")
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(out)
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the softrdma module: run from the repository (go run ./bench/compare)")
	}
	bin := filepath.Join(dir, "grpcbench")
	c, err := startDir(ctx, 10*time.Minute, filepath.Join(filepath.Dir(gomod), "bench", "grpc"), nil, goBin, "build", "-o", bin, ".")
	if err != nil {
		return "", err
	}
	<-c.done
	if c.err != nil {
		return "", fmt.Errorf("go build ./bench/grpc: %v\n%s", c.err, indent(c.tail(20)))
	}
	return bin, nil
}

// probePerftest reports whether the CLI has the two-process perftest
// commands, and if not, why.
func probePerftest(ctx context.Context, bin string) (bool, string) {
	out, _ := runOne(ctx, 10*time.Second, nil, bin, "ib_write_bw", "-h")
	if strings.Contains(out, "ib_write_bw <host>") {
		return true, ""
	}
	return false, fmt.Sprintf("`softrdma ib_write_bw -h` does not show perftest's usage:\n%s", indent(tailLines(out, 3)))
}

// perftest runs test (ib_write_bw, ib_send_lat, ...) with server and client
// in two processes, each with its own device address; both get extra
// (e.g. --secure auth).
func (s *softrdma) perftest(ctx context.Context, test string, size, iters int, extra ...string) (metrics, runInfo, error) {
	if !s.twoProc {
		return s.bench(ctx, test, size, iters, extra...)
	}
	port, err := freePort()
	if err != nil {
		return nil, runInfo{}, err
	}
	n, warm := latWarmup(test, iters)
	args := append([]string{test, "-p", itoa(port), "-s", itoa(size), "-n", itoa(n)}, extra...)
	if warm > 0 {
		args = append(args, "-U")
	}
	r, err := runPair(ctx, s.timeout, pairSpec{
		env:    s.env,
		srvEnv: []string{"SOFTRDMA_ADDR=" + s.srvAddr}, cliEnv: []string{"SOFTRDMA_ADDR=" + s.cliAddr},
		srvName: s.bin, srvArgs: args,
		cliName: s.bin, cliArgs: append(append([]string{}, args...), s.srvAddr),
		port: port,
	})
	envs := strings.Join(s.env, " ")
	if envs != "" {
		envs += " "
	}
	info := runInfo{Cmds: []string{envs + "SOFTRDMA_ADDR=" + s.srvAddr + " " + r.srvCmd, envs + "SOFTRDMA_ADDR=" + s.cliAddr + " " + r.cliCmd}}
	if err != nil {
		return nil, info, err
	}
	m, raw, err := parsePerftestRun(r.cliOut, size, warm)
	info.Raw = raw
	return m, info, err
}

// bench is the one-process fallback: `softrdma bench` for one operation and
// one size; extra is perftest's --secure <mode>, if any.
func (s *softrdma) bench(ctx context.Context, test string, size, iters int, extra ...string) (metrics, runInfo, error) {
	op := strings.Split(strings.TrimPrefix(test, "ib_"), "_") // write, bw
	f := filepath.Join(s.tmp, "bench.json")
	os.Remove(f)
	args := []string{"bench", "-ops", op[0], "-sizes", itoa(size), "-json", f, "-plot", "", "-a", s.srvAddr, "-b", s.cliAddr}
	if len(extra) == 2 && extra[0] == "--secure" {
		args = append(args, "-secure", extra[1])
	}
	if op[1] == "lat" {
		args = append(args, "-no-bw", "-lat-n", itoa(iters))
	} else {
		args = append(args, "-no-lat", "-n", itoa(iters))
	}
	info := runInfo{Cmds: []string{strings.TrimSpace(strings.Join(s.env, " ") + " " + s.bin + " " + strings.Join(args, " "))}}
	if _, err := runOne(ctx, s.timeout, s.env, s.bin, args...); err != nil {
		return nil, info, err
	}
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, info, err
	}
	m, raw, err := parseBenchJSON(data, size)
	info.Raw = raw
	return m, info, err
}

// ---- installing the anchors --------------------------------------------

// ensureTools makes sure the binaries exist, installing pkg with apt-get if
// allowed. It returns "" or why the stack must be skipped.
func ensureTools(ctx context.Context, install bool, pkg string, bins ...string) string {
	missing := func() []string {
		var m []string
		for _, b := range bins {
			if _, err := exec.LookPath(b); err != nil {
				m = append(m, b)
			}
		}
		return m
	}
	m := missing()
	if len(m) == 0 {
		return ""
	}
	if !install {
		return fmt.Sprintf("%s not found and -install=false (apt-get install %s)", strings.Join(m, ", "), pkg)
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("%s not found and not root to apt-get install %s", strings.Join(m, ", "), pkg)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Sprintf("%s not found and no apt-get to install %s", strings.Join(m, ", "), pkg)
	}
	fmt.Printf("installing %s with apt-get ...\n", pkg)
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	install1 := func() error {
		_, err := runOne(ctx, 10*time.Minute, env, "apt-get", "install", "-y", "-q", "--no-install-recommends", pkg)
		return err
	}
	err := install1()
	if err != nil {
		// The package lists may be missing or stale (fresh containers).
		if _, uerr := runOne(ctx, 5*time.Minute, env, "apt-get", "update", "-q"); uerr == nil {
			err = install1()
		}
	}
	if err != nil {
		return fmt.Sprintf("apt-get install %s failed: %v", pkg, firstLine(err.Error()))
	}
	if m := missing(); len(m) > 0 {
		return fmt.Sprintf("installed %s but %s still missing", pkg, strings.Join(m, ", "))
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// ---- UCX ----------------------------------------------------------------

type ucx struct {
	timeout time.Duration
	env     []string
	version string
	pin     bool // server on CPU 0, client on CPU 1
}

// setupUCX checks for ucx_perftest and its tcp transport on lo.
func setupUCX(ctx context.Context, install bool) (*ucx, string) {
	if why := ensureTools(ctx, install, "ucx-utils", "ucx_perftest", "ucx_info"); why != "" {
		return nil, why
	}
	u := &ucx{env: []string{"UCX_TLS=tcp", "UCX_NET_DEVICES=lo", "UCX_WARN_UNUSED_ENV_VARS=n"}}
	if out, err := runOne(ctx, 20*time.Second, nil, "ucx_info", "-v"); err == nil {
		u.version = strings.TrimPrefix(firstLine(out), "# ")
	}
	out, err := runOne(ctx, 20*time.Second, u.env, "ucx_info", "-d")
	if err != nil {
		return nil, fmt.Sprintf("ucx_info -d: %v", firstLine(err.Error()))
	}
	if !regexp.MustCompile(`Transport: tcp\s+#\s+Device: lo`).MatchString(out) {
		return nil, "UCX has no tcp transport on device lo (ucx_info -d)"
	}
	return u, ""
}

// run runs one ucx_perftest test; pct (>0) sets the latency percentile.
func (u *ucx) run(ctx context.Context, test string, size, iters int, pct float64) (metrics, runInfo, error) {
	port, err := freePort()
	if err != nil {
		return nil, runInfo{}, err
	}
	warm := warmupOf(iters)
	args := []string{"127.0.0.1", "-p", itoa(port), "-t", test, "-s", itoa(size), "-n", itoa(iters), "-w", itoa(warm), "-f", "-v"}
	if pct > 0 {
		args = append(args, "-R", strconv.FormatFloat(pct, 'f', 1, 64))
	}
	r, err := runPair(ctx, u.timeout, pairSpec{
		env:     u.env,
		srvName: "ucx_perftest", srvArgs: []string{"-p", itoa(port)},
		cliName: "ucx_perftest", cliArgs: args,
		port: port, pin: u.pin,
	})
	envs := strings.Join(u.env[:2], " ") + " "
	info := runInfo{Cmds: []string{envs + r.srvCmd, envs + r.cliCmd}}
	if err != nil {
		return nil, info, err
	}
	m, raw, err := parseUCX(r.cliOut, strings.HasSuffix(test, "_lat"))
	info.Raw = raw
	return m, info, err
}

// ---- libfabric -----------------------------------------------------------

type fabric struct {
	timeout  time.Duration
	pin      bool // server on CPU 0, client on CPU 1
	version  string
	tcp, udp bool
	udpMax   int // the udp provider's max_msg_size (dgram)
	why      map[string]string
}

// setupFabric checks for fi_pingpong and which of the tcp (msg endpoints)
// and udp (dgram endpoints) providers this libfabric has.
func setupFabric(ctx context.Context, install bool) (*fabric, string) {
	if why := ensureTools(ctx, install, "libfabric-bin", "fi_pingpong", "fi_info"); why != "" {
		return nil, why
	}
	f := &fabric{udpMax: 1472, why: map[string]string{}}
	if out, err := runOne(ctx, 20*time.Second, nil, "fi_info", "--version"); err == nil {
		f.version = strings.Join(strings.Fields(out), " ")
	}
	if _, err := runOne(ctx, 20*time.Second, nil, "fi_info", "-p", "tcp", "-t", "FI_EP_MSG"); err == nil {
		f.tcp = true
	} else {
		f.why["tcp"] = "fi_info -p tcp -t FI_EP_MSG: no tcp provider with msg endpoints"
	}
	if out, err := runOne(ctx, 20*time.Second, nil, "fi_info", "-p", "udp", "-t", "FI_EP_DGRAM", "-v"); err == nil {
		f.udp = true
		if m := regexp.MustCompile(`max_msg_size:\s*(\d+)`).FindStringSubmatch(out); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				f.udpMax = n
			}
		}
	} else {
		f.why["udp"] = "fi_info -p udp -t FI_EP_DGRAM: no udp provider with dgram endpoints"
	}
	if !f.tcp && !f.udp {
		return nil, "libfabric has neither a tcp nor a udp provider (fi_info -l)"
	}
	return f, ""
}

// run runs fi_pingpong with provider prov ("tcp" over msg endpoints, "udp"
// over dgram endpoints) for one size.
func (f *fabric) run(ctx context.Context, prov string, size, iters int) (metrics, runInfo, error) {
	port, err := freePort()
	if err != nil {
		return nil, runInfo{}, err
	}
	args := []string{"-p", prov, "-S", itoa(size), "-I", itoa(iters)}
	switch prov {
	case "tcp":
		args = append(args, "-e", "msg")
	case "shm":
		args = append(args, "-e", "rdm")
	}
	r, err := runPair(ctx, f.timeout, pairSpec{
		srvName: "fi_pingpong", srvArgs: append(append([]string{}, args...), "-B", itoa(port)),
		cliName: "fi_pingpong", cliArgs: append(append([]string{}, args...), "-P", itoa(port), "127.0.0.1"),
		port: port, pin: f.pin,
	})
	info := runInfo{Cmds: []string{r.srvCmd, r.cliCmd}}
	if err != nil {
		return nil, info, err
	}
	m, raw, err := parseFiPingpong(r.cliOut)
	info.Raw = raw
	return m, info, err
}

// ---- plain Go --------------------------------------------------------------

type goBase struct {
	self           string // this binary
	timeout        time.Duration
	srvDev, cliDev string // proto rdmanet: the soft devices' addresses
}

func (g *goBase) run(ctx context.Context, proto, mode string, size, n int) (metrics, runInfo, error) {
	return g.runBin(ctx, g.self, proto, mode, size, n)
}

// runBin runs a server and a client of bin, a program that speaks the
// _go-server / _go-client protocol: this one, or bench/grpc's.
func (g *goBase) runBin(ctx context.Context, bin, proto, mode string, size, n int) (metrics, runInfo, error) {
	opts := []string{"-proto", proto, "-mode", mode, "-size", itoa(size), "-n", itoa(n), "-warm", itoa(max(10, n/10))}
	srvArgs, cliArgs := []string{"_go-server", "-addr", "127.0.0.1:0"}, []string{"_go-client"}
	if proto == "rdmanet" {
		srvArgs = []string{"_go-server", "-addr", g.srvDev + ":0", "-dev", g.srvDev}
		cliArgs = []string{"_go-client", "-dev", g.cliDev}
	}
	ps := pairSpec{srvName: bin, srvArgs: append(append([]string{}, srvArgs...), "-proto", proto, "-mode", mode, "-s", itoa(size))}
	srv, err := start(ctx, g.timeout, profileEnv(ps, nil, "srv"), bin, append(srvArgs, opts...)...)
	if err != nil {
		return nil, runInfo{}, err
	}
	defer killGroup(srv.cmd)
	info := runInfo{Cmds: []string{srv.cmdline()}}
	if err := waitOutput(srv, "READY ", 15*time.Second); err != nil {
		return nil, info, err
	}
	addr := ""
	for _, l := range strings.Split(srv.out.String(), "\n") {
		if a, ok := strings.CutPrefix(l, "READY "); ok {
			addr = strings.TrimSpace(a)
		}
	}
	cli, err := start(ctx, g.timeout, profileEnv(ps, nil, "cli"), bin, append(append(cliArgs, "-addr", addr), opts...)...)
	if err != nil {
		return nil, info, err
	}
	info.Cmds = append(info.Cmds, cli.cmdline())
	<-cli.done
	if cli.err != nil {
		return nil, info, fmt.Errorf("client: %v\n%s\n  server said:\n%s", cli.err, indent(cli.tail(6)), indent(srv.tail(6)))
	}
	if err := srv.wait(5 * time.Second); err != nil {
		return nil, info, fmt.Errorf("server: %v\n%s", err, indent(srv.tail(6)))
	}
	out := cli.out.String()
	if proto == "udp" && mode == "stream" {
		out = srv.out.String() // the receiver knows what arrived
	}
	m, raw, err := parseResult(out)
	info.Raw = raw
	return m, info, err
}
