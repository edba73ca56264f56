//go:build linux

// Command nvme measures softrdma's NVMe-oF target and host side by side
// with the floor: 4 KiB random reads and writes at queue depth 1 and 32,
// over the RoCEv2 provider (two processes on loopback) and over shared
// memory, beside the same I/O done locally on the backing file with
// O_DIRECT. For each it prints IOPS, MB/s, p50 and p99 latency, and the
// target's CPU seconds per million I/Os.
//
//	go run ./bench/nvme                       # ~1 min
//	go run ./bench/nvme -time 10s -rounds 3   # medians of 3 interleaved rounds
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

type result struct {
	IOPS, MBps, P50, P99, TargetCPUPerM float64
}

func main() {
	dur := flag.Duration("time", 4*time.Second, "run time of each measurement")
	rounds := flag.Int("rounds", 1, "interleaved rounds; the table shows medians")
	size := flag.Int64("size", 256<<20, "namespace (file) size in bytes")
	dir := flag.String("dir", "/var/tmp", "directory for the backing file (a file system with O_DIRECT: not tmpfs)")
	stacks := flag.String("stacks", "floor,soft,shm", "what to measure")
	flag.Parse()
	log.SetFlags(0)

	tmp, err := os.MkdirTemp("", "softrdma-nvme-bench")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "softrdma")
	build := exec.Command("go", "build", "-o", bin, "./cmd/softrdma")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	check(build.Run())
	img := filepath.Join(*dir, fmt.Sprintf("softrdma-nvme-bench-%d.img", os.Getpid()))
	check(fillFile(img, *size))
	defer os.Remove(img)

	type key struct{ stack, work string }
	res := map[key][]result{}
	works := []struct {
		name  string
		write bool
		qd    int
	}{{"randread qd1", false, 1}, {"randwrite qd1", true, 1}, {"randread qd32", false, 32}, {"randwrite qd32", true, 32}}
	for r := range *rounds {
		for _, stack := range strings.Split(*stacks, ",") {
			for _, w := range works {
				var out result
				if stack == "floor" {
					out = local(img, w.write, w.qd, *dur)
				} else {
					out = remote(bin, img, stack, w.write, w.qd, *dur, r)
				}
				fmt.Fprintf(os.Stderr, "round %d %-5s %-15s %8.0f IOPS p50 %6.1f µs p99 %7.1f µs\n", r+1, stack, w.name, out.IOPS, out.P50, out.P99)
				res[key{stack, w.name}] = append(res[key{stack, w.name}], out)
			}
		}
	}
	fmt.Printf("\n4 KiB random I/O, %v per run, medians of %d round(s); target CPU is seconds per million I/Os\n\n", *dur, *rounds)
	fmt.Printf("| work | stack | IOPS | MB/s | p50 µs | p99 µs | target CPU s/M | IOPS / floor |\n|---|---|---|---|---|---|---|---|\n")
	for _, w := range works {
		floor := median(res[key{"floor", w.name}], func(r result) float64 { return r.IOPS })
		for _, stack := range strings.Split(*stacks, ",") {
			rs := res[key{stack, w.name}]
			m := func(f func(result) float64) float64 { return median(rs, f) }
			ratio := "—"
			if stack != "floor" && floor > 0 {
				ratio = fmt.Sprintf("%.2f×", m(func(r result) float64 { return r.IOPS })/floor)
			}
			cpu := "—"
			if stack != "floor" {
				cpu = fmt.Sprintf("%.2f", m(func(r result) float64 { return r.TargetCPUPerM }))
			}
			fmt.Printf("| %s | %s | %.0f | %.1f | %.1f | %.1f | %s | %s |\n", w.name, stack,
				m(func(r result) float64 { return r.IOPS }), m(func(r result) float64 { return r.MBps }),
				m(func(r result) float64 { return r.P50 }), m(func(r result) float64 { return r.P99 }), cpu, ratio)
		}
	}
}

func median(rs []result, f func(result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func fillFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// local is the floor: the same I/O on the backing file with O_DIRECT,
// qd goroutines each keeping one request in flight.
func local(path string, write bool, qd int, dur time.Duration) result {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT, 0)
	check(err)
	defer unix.Close(fd)
	var st unix.Stat_t
	check(unix.Fstat(fd, &st))
	blocks := st.Size / 4096
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	lats := make([][]time.Duration, qd)
	t0 := time.Now()
	for g := range qd {
		wg.Go(func() {
			mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			check(err)
			defer unix.Munmap(mem)
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for ctx.Err() == nil {
				off := rng.Int64N(blocks) * 4096
				s := time.Now()
				if write {
					_, err = unix.Pwrite(fd, mem, off)
				} else {
					_, err = unix.Pread(fd, mem, off)
				}
				check(err)
				lats[g] = append(lats[g], time.Since(s))
			}
		})
	}
	wg.Wait()
	return summarize(slices.Concat(lats...), time.Since(t0))
}

func summarize(all []time.Duration, elapsed time.Duration) result {
	slices.Sort(all)
	if len(all) == 0 {
		return result{}
	}
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Nanoseconds()) / 1e3
	}
	iops := float64(len(all)) / elapsed.Seconds()
	return result{IOPS: iops, MBps: iops * 4096 / (1 << 20), P50: pct(0.5), P99: pct(0.99)}
}

// remote starts `softrdma nvmet` on the file and runs `softrdma nvme perf`
// against it as another process, over a soft device on loopback or shm.
func remote(bin, img, stack string, write bool, qd int, dur time.Duration, round int) result {
	port := strconv.Itoa(4420 + 10*round + rand.IntN(9))
	nqn := "nqn.2026-11.dev.softrdma:bench"
	targs := []string{"nvmet", "-a", "127.0.0.1", "-s", port, "-n", nqn, "-f", img}
	hargs := []string{"nvme", "perf", "-t", "rdma", "-a", "127.0.0.1", "-s", port, "-n", nqn, "-w", "127.0.0.2",
		"-q", strconv.Itoa(qd), "-T", dur.String(), "--json", "--queues", strconv.Itoa(min(qd, 2))}
	if write {
		hargs = append(hargs, "--workload", "randwrite")
	}
	if stack == "shm" {
		targs = append(targs, "-d", "shm0")
		hargs = append(hargs, "-d", "shm0")
	}
	target := exec.Command(bin, targs...)
	stdout, err := target.StdoutPipe()
	check(err)
	target.Stderr = os.Stderr
	check(target.Start())
	defer func() { target.Process.Signal(os.Interrupt); target.Wait() }()
	if !bufio.NewScanner(stdout).Scan() { // "nvmet: serving ..." once it listens
		log.Fatalf("%s: the target did not start", stack)
	}
	cpu0 := procCPU(target.Process.Pid)
	out, err := exec.Command(bin, hargs...).Output()
	if err != nil {
		log.Fatalf("%s perf: %v\n%s", stack, err, out)
	}
	cpu1 := procCPU(target.Process.Pid)
	var pr struct {
		IOPS  float64 `json:"iops"`
		MBps  float64 `json:"mb_per_s"`
		P50   float64 `json:"lat_p50_us"`
		P99   float64 `json:"lat_p99_us"`
		IOs   int     `json:"ios"`
		CPUs  float64 `json:"cpu_seconds"`
		Secs  float64 `json:"seconds"`
		Queue int     `json:"queue_depth"`
	}
	check(json.Unmarshal(out, &pr))
	r := result{IOPS: pr.IOPS, MBps: pr.MBps, P50: pr.P50, P99: pr.P99}
	if pr.IOs > 0 {
		r.TargetCPUPerM = (cpu1 - cpu0) / float64(pr.IOs) * 1e6
	}
	return r
}

// procCPU is a process's user+system CPU seconds from /proc/PID/stat.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}
