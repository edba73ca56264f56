//go:build linux

package main

// The shared-memory comparison: softrdma's perftest tools over provider/shm
// (`-d shm0`, two processes on this host) against UCX over POSIX shared
// memory (UCX_TLS=posix,self) and libfabric's shm provider (fi_pingpong,
// latency only), with these targets:
//
//	8 B WRITE latency        ≤ 1.2 × UCX posix ucp_put_lat
//	64 KiB WRITE bandwidth   ≥ 0.9 × UCX posix ucp_put_bw
//	8 B SEND/RECV latency    ≤ UCX posix tag_lat
//	8 B message rate         reported (WRITE and SEND, beside UCX tag_bw)
//
// Its series are kept out of the loopback tables (their ratios are to the
// UDP WRITE) and get a table of their own.

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"time"
)

const (
	seriesShmWrite = "softrdma shm WRITE"
	seriesShmSend  = "softrdma shm SEND"
	seriesPosixPut = "UCX posix put"
	seriesPosixTag = "UCX posix tag"
	seriesFabShm   = "libfabric shm"
	shmBWSize      = 64 << 10 // the bandwidth target's size
	shmLatFactor   = 1.2      // WRITE latency target: at most this times UCX's put latency
	shmBWFactor    = 0.9      // bandwidth target: at least this times UCX's put bandwidth
	shmDevice      = "shm0"
)

// isShmSeries reports whether a series belongs to the shared-memory table.
func isShmSeries(s string) bool {
	return strings.HasPrefix(s, "softrdma shm ") || strings.HasPrefix(s, "UCX posix ") || s == seriesFabShm || s == seriesCacheLine
}

// shmPerftest runs a softrdma perftest tool over the shared-memory device:
// server and client in two processes, meeting over TCP on 127.0.0.1.
func (s *softrdma) shmPerftest(ctx context.Context, test string, size, iters int) (metrics, runInfo, error) {
	port, err := freePort()
	if err != nil {
		return nil, runInfo{}, err
	}
	n, warm := latWarmup(test, iters)
	args := []string{test, "-d", shmDevice, "-p", itoa(port), "-s", itoa(size), "-n", itoa(n)}
	if warm > 0 {
		args = append(args, "-U")
	}
	r, err := runPair(ctx, s.timeout, pairSpec{
		env:     s.env,
		srvName: s.bin, srvArgs: args,
		cliName: s.bin, cliArgs: append(append([]string{}, args...), "127.0.0.1"),
		port: port, pin: s.pinShm,
	})
	envs := strings.Join(s.env, " ")
	if envs != "" {
		envs += " "
	}
	info := runInfo{Cmds: []string{envs + r.srvCmd, envs + r.cliCmd}}
	if err != nil {
		return nil, info, err
	}
	m, raw, err := parsePerftestRun(r.cliOut, size, warm)
	info.Raw = raw
	return m, info, err
}

// shmJobs adds the shared-memory measurements: softrdma's over
// provider/shm, UCX posix's if u is not nil and libfabric shm's
// fi_pingpong (a SEND ping-pong; it reports the average only) if f is not
// nil.
func shmJobs(cfg *config, sr *softrdma, u *ucx, f *fabric, add func(series, tool, kind string, size int, run func(context.Context) (metrics, runInfo, error))) {
	if f != nil {
		add(seriesFabShm, "fi_pingpong -p shm -e rdm", "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
			return f.run(ctx, "shm", latSize, cfg.latN)
		})
	}
	// The machine's floor for any of them (cacheline.go).
	add(seriesCacheLine, cacheLineTool, "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
		return cacheLineProbe(ctx, cfg.latN)
	})
	tool := func(t string) string { return t + " -d " + shmDevice }
	for _, j := range []struct {
		series, test, kind string
		size, iters        int
	}{
		{seriesShmWrite, "ib_write_lat", "lat", latSize, cfg.latN},
		{seriesShmSend, "ib_send_lat", "lat", latSize, cfg.latN},
		{seriesShmWrite, "ib_write_bw", "bw", latSize, cfg.srSmallMsgs},
		{seriesShmSend, "ib_send_bw", "bw", latSize, cfg.srSmallMsgs},
		{seriesShmWrite, "ib_write_bw", "bw", shmBWSize, cfg.shmBWIters()},
	} {
		add(j.series, tool(j.test), j.kind, j.size, func(ctx context.Context) (metrics, runInfo, error) {
			return sr.shmPerftest(ctx, j.test, j.size, j.iters)
		})
	}
	if u == nil {
		return
	}
	for _, j := range []struct {
		series, test, kind string
		size, iters        int
		pct                float64
	}{
		{seriesPosixPut, "ucp_put_lat", "lat", latSize, cfg.latN, 50},
		{seriesPosixTag, "tag_lat", "lat", latSize, cfg.latN, 50},
		{seriesPosixTag, "tag_bw", "bw", latSize, cfg.srSmallMsgs, 0},
		{seriesPosixPut, "ucp_put_bw", "bw", shmBWSize, cfg.shmBWIters(), 0},
	} {
		t := j.test
		if j.pct > 0 {
			t += fmt.Sprintf(" -R %g", j.pct)
		}
		add(j.series, t, j.kind, j.size, func(ctx context.Context) (metrics, runInfo, error) {
			return u.run(ctx, j.test, j.size, j.iters, j.pct)
		})
	}
}

// shmPin decides whether the shm stack pins its processes, and says why
// not when it cannot. A ping-pong in shared memory needs both ends on a
// core at once: unpinned, the scheduler may put both on one CPU (the
// other busy), where they hand over by sched_yield, about 2 µs a turn
// against 0.1 µs on two cores, and the median measures the placement.
// Pinning treats softrdma and UCX alike.
func shmPin(want bool) (bool, string) {
	if !want {
		return false, "shm stack unpinned (-shm-pin=false): latencies depend on where the scheduler puts the two processes"
	}
	if runtime.NumCPU() < 2 {
		return false, "shm stack unpinned: one CPU"
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return false, "shm stack unpinned: no taskset (util-linux)"
	}
	return true, "shm stack pinned, softrdma and UCX alike: servers on CPU 0, clients on CPU 1 (taskset)"
}

// setupFabricShm checks for fi_pingpong and libfabric's shm provider.
func setupFabricShm(ctx context.Context, install bool) (*fabric, string) {
	if why := ensureTools(ctx, install, "libfabric-bin", "fi_pingpong", "fi_info"); why != "" {
		return nil, why
	}
	f := &fabric{why: map[string]string{}}
	if out, err := runOne(ctx, 20*time.Second, nil, "fi_info", "--version"); err == nil {
		f.version = strings.Join(strings.Fields(out), " ")
	}
	if _, err := runOne(ctx, 20*time.Second, nil, "fi_info", "-p", "shm", "-t", "FI_EP_RDM"); err != nil {
		return nil, "fi_info -p shm -t FI_EP_RDM: no shm provider with rdm endpoints"
	}
	return f, ""
}

// shmBWIters is the number of 64 KiB messages of a shared-memory
// bandwidth run: the byte budget, at least max-msgs (at tens of GB/s the
// budget alone lasts milliseconds).
func (c *config) shmBWIters() int {
	return int(max(int64(c.maxMsgs), c.budget/shmBWSize))
}

// setupPosixUCX checks for ucx_perftest and UCX's posix shared-memory
// transport; the runs use it with UCX's loopback "self" transport beside
// it, as UCX wants.
func setupPosixUCX(ctx context.Context, install bool) (*ucx, string) {
	if why := ensureTools(ctx, install, "ucx-utils", "ucx_perftest", "ucx_info"); why != "" {
		return nil, why
	}
	u := &ucx{env: []string{"UCX_TLS=posix,self", "UCX_WARN_UNUSED_ENV_VARS=n"}}
	if out, err := runOne(ctx, 20*time.Second, nil, "ucx_info", "-v"); err == nil {
		u.version = strings.TrimPrefix(firstLine(out), "# ")
	}
	out, err := runOne(ctx, 20*time.Second, nil, "ucx_info", "-d")
	if err != nil {
		return nil, fmt.Sprintf("ucx_info -d: %v", firstLine(err.Error()))
	}
	if !regexp.MustCompile(`Transport: posix\b`).MatchString(out) {
		return nil, "UCX has no posix shared-memory transport (ucx_info -d)"
	}
	return u, ""
}

// shmTargets are the shm stack's targets.
func (r *report) shmTargets() []target {
	var out []target
	srLat, ok1 := r.get(seriesShmWrite, "lat", latSize, "lat_p50_us")
	ucxLat, ok2 := r.get(seriesPosixPut, "lat", latSize, "lat_p50_us")
	out = append(out, mkTarget("shm: 8 B RDMA WRITE one-way latency (median) ≤ 1.2 × UCX posix ucp_put_lat", "µs", "lower",
		"UCX posix ucp_put_lat 8 B median", shmLatFactor, srLat, ucxLat, ok1, ok2))
	srBW, ok1 := r.get(seriesShmWrite, "bw", shmBWSize, "bw_MiBps")
	ucxBW, ok2 := r.get(seriesPosixPut, "bw", shmBWSize, "bw_MiBps")
	out = append(out, mkTarget("shm: 64 KiB RDMA WRITE bandwidth ≥ 0.9 × UCX posix ucp_put_bw", "MB/s", "higher",
		"UCX posix ucp_put_bw 64 KiB", shmBWFactor, srBW, ucxBW, ok1, ok2))
	srSend, ok1 := r.get(seriesShmSend, "lat", latSize, "lat_p50_us")
	ucxTag, ok2 := r.get(seriesPosixTag, "lat", latSize, "lat_p50_us")
	out = append(out, mkTarget("shm: 8 B SEND/RECV one-way latency (median) ≤ UCX posix tag_lat", "µs", "lower",
		"UCX posix tag_lat 8 B median", 1, srSend, ucxTag, ok1, ok2))
	for _, s := range []string{seriesShmWrite, seriesShmSend} {
		rate, ok1 := r.get(s, "bw", latSize, "msg_rate_M")
		tagRate, ok2 := r.get(seriesPosixTag, "bw", latSize, "msg_rate_M")
		t := mkTarget("shm: 8 B "+strings.TrimPrefix(s, "softrdma shm ")+" message rate (reported)", "M msgs/s", "higher",
			"UCX posix tag_bw 8 B", 1, rate, tagRate, ok1, ok2)
		t.Met, t.Reported = nil, ok1
		out = append(out, t)
	}
	return out
}

// printShm prints the shared-memory table: every shm series' 8-byte
// latency, 8-byte message rate and 64 KiB bandwidth.
func (r *report) printShm(w io.Writer) {
	var series []string
	for _, s := range r.series {
		if isShmSeries(s) {
			series = append(series, s)
		}
	}
	if len(series) == 0 {
		return
	}
	fmt.Fprintf(w, "\nshared memory, two processes on this host: softrdma `-d %s` (provider/shm) vs UCX_TLS=posix,self and libfabric shm; medians (min..max over rounds)\n", shmDevice)
	rows := [][]string{{"series", "tools", "8 B lat p50 µs", "8 B lat avg µs", "8 B rate M/s", "64 KiB MB/s"}}
	cell := func(s, kind string, size int, metric string) string {
		m, ok := r.find(s, kind, size, metric)
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%s (%s..%s)", num(m.Median, true), num(m.Min, true), num(m.Max, true))
	}
	for _, s := range series {
		tools := r.tools[s+"|lat"]
		if b := r.tools[s+"|bw"]; b != "" {
			tools = strings.TrimPrefix(tools+", "+b, ", ")
		}
		rows = append(rows, []string{s, tools, cell(s, "lat", latSize, "lat_p50_us"), cell(s, "lat", latSize, "lat_avg_us"),
			cell(s, "bw", latSize, "msg_rate_M"), cell(s, "bw", shmBWSize, "bw_MiBps")})
	}
	table(w, 2, rows)
}
