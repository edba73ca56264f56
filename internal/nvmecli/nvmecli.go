// Package nvmecli is softrdma's NVMe-oF tools: `softrdma nvmet` serves a
// file or memory as a namespace, `softrdma nvme` speaks like nvme-cli with
// a fabric address in place of a device node (discover, id-ctrl, id-ns,
// read, write) and measures with perf.
package nvmecli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/nvmeof"
	"github.com/softrdma/softrdma/verbs"
)

// Opener opens the device a tool runs on: the device named (shm0, ...),
// else the softrdma device of local, else of the address the routing
// table uses towards remote. The CLI passes its own, which applies the
// SOFTRDMA_* switches as every tool does.
type Opener func(name, local, remote string) (verbs.Context, error)

// parseSize reads 64M, 1G, 4096, 512k.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"), strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "g"), strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: give a positive number of bytes, optionally with k, M or G", s)
	}
	return n * mult, nil
}

// RunTarget is `softrdma nvmet`: serve one subsystem with one namespace
// until ctx ends.
//
//	softrdma nvmet -a ADDR [-s 4420] -n NQN (-f FILE | --size SIZE) [-b 4096] [-d shm0] [--allow-host NQN]...
func RunTarget(ctx context.Context, args []string, stdout, stderr io.Writer, open Opener) error {
	if open == nil {
		return errors.New("nvmet: no device opener given")
	}
	fs := flag.NewFlagSet("nvmet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("a", "", "`address` to listen on (IPv4 or IPv6 of a local interface; 127.0.0.1 for shm)")
	port := fs.Int("s", 4420, "`port` (NVMe-oF's RDMA port is 4420)")
	nqn := fs.String("n", "", "the subsystem's `NQN`")
	file := fs.String("f", "", "serve this `file` or block device")
	size := fs.String("size", "", "serve this much memory (64M, 1G)")
	bs := fs.Int("b", 4096, "logical block size: 512 or 4096")
	dev := fs.String("d", "", "device: shm0 for shared memory (default: the RoCEv2 device of -a)")
	ro := fs.Bool("read-only", false, "refuse writes")
	inCap := fs.Int("in-capsule", 0, "in-capsule data `bytes` per I/O command (default 8192; -1 none)")
	maxQ := fs.Int("max-queues", 0, "most I/O queues per controller (default 8)")
	verbose := fs.Bool("v", false, "log controllers and queues")
	var hosts stringList
	fs.Var(&hosts, "allow-host", "host `NQN` allowed to connect (repeatable; default: any)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *nqn == "":
		return errors.New("nvmet: -n NQN is required (nqn.2014-08.org.example:disk1)")
	case (*file == "") == (*size == ""):
		return errors.New("nvmet: give exactly one of -f FILE and --size SIZE")
	case *addr == "":
		return errors.New("nvmet: -a ADDR is required (the local address to serve on)")
	case *port <= 0 || *port > 65535:
		return fmt.Errorf("nvmet: port %d", *port)
	}
	var store nvmeof.Store
	desc := ""
	if *file != "" {
		fsStore, err := nvmeof.OpenFileStore(*file)
		if err != nil {
			return err
		}
		defer fsStore.Close()
		store, desc = fsStore, *file
	} else {
		n, err := parseSize(*size)
		if err != nil {
			return err
		}
		store, desc = nvmeof.NewMemoryStore(n), "memory"
	}
	cfg := nvmeof.TargetConfig{
		Subsystems:        []*nvmeof.Subsystem{{NQN: *nqn, AllowedHosts: hosts, Namespaces: []*nvmeof.Namespace{{ID: 1, Store: store, BlockSize: *bs, ReadOnly: *ro}}}},
		InCapsuleDataSize: *inCap, MaxIOQueues: *maxQ,
	}
	if *verbose {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }
	}
	t, err := nvmeof.NewTarget(cfg)
	if err != nil {
		return err
	}
	vdev, err := open(*dev, *addr, "")
	if err != nil {
		return err
	}
	defer vdev.Close()
	defer cm.Detach(vdev)
	ip, err := device.ResolveIP(*addr)
	if err != nil {
		return err
	}
	ln, err := cm.Listen("rdma", netip.AddrPortFrom(ip, uint16(*port)).String(), &cm.Options{Context: vdev})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "nvmet: serving %s (%s, %d bytes, %d-byte blocks) on %s port %d\n", *nqn, desc, store.Size(), *bs, ip, *port)
	go func() { <-ctx.Done(); t.Close() }()
	err = t.Serve(ctx, ln)
	t.Close()
	t.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
