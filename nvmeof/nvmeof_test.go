package nvmeof_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/nvmeof"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// fabric is a target and a host device: two soft devices on loopback
// addresses, each its own UDP port, in this process.
type fabric struct {
	tdev, hdev verbs.Context
	addr       string // the target's IP:port for hosts
	target     *nvmeof.Target
	store      *nvmeof.MemoryStore
}

const testNQN = "nqn.2026-11.dev.softrdma:test"

var nextNet = struct {
	sync.Mutex
	n int
}{n: 10}

func newFabricB(b *testing.B) *fabric { return newFabric(b, nvmeof.TargetConfig{}, 4096) }

func newFabric(t testing.TB, cfg nvmeof.TargetConfig, blockSize int) *fabric {
	t.Helper()
	nextNet.Lock()
	nextNet.n++
	n := nextNet.n
	nextNet.Unlock()
	ta, ha := netip.AddrFrom4([4]byte{127, 0, 88, byte(2 * n)}), netip.AddrFrom4([4]byte{127, 0, 88, byte(2*n + 1)})
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: ta.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(probe.LocalAddr().(*net.UDPAddr).Port)
	probe.Close()
	tdev, err := soft.Open(soft.Config{Addr: ta, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	hdev, err := soft.Open(soft.Config{Addr: ha, Port: port})
	if err != nil {
		tdev.Close()
		t.Fatal(err)
	}
	f := &fabric{tdev: tdev, hdev: hdev, addr: netip.AddrPortFrom(ta, 4420).String(), store: nvmeof.NewMemoryStore(64 << 20)}
	if cfg.Subsystems == nil {
		cfg.Subsystems = []*nvmeof.Subsystem{{NQN: testNQN, Namespaces: []*nvmeof.Namespace{{ID: 1, Store: f.store, BlockSize: blockSize}}}}
	}
	cfg.Logf = t.Logf
	f.target, err = nvmeof.NewTarget(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := cm.Listen("rdma", f.addr, &cm.Options{Context: tdev})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { f.target.Serve(context.Background(), ln); close(served) }()
	t.Cleanup(func() {
		f.target.Close()
		<-served
		f.target.Wait()
		cm.Detach(hdev)
		cm.Detach(tdev)
		hdev.Close()
		tdev.Close()
	})
	return f
}

func (f *fabric) hostConfig() *nvmeof.HostConfig {
	return &nvmeof.HostConfig{CM: &cm.Options{Context: f.hdev}, IOQueues: 2, QueueSize: 16}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestIdentifyAndIO(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			f := newFabric(t, nvmeof.TargetConfig{}, bs)
			c, err := nvmeof.Connect(ctx(t), f.addr, testNQN, f.hostConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			info := c.Info()
			if info.SubNQN != testNQN || info.NN != 1 || info.KAS == 0 || info.IOCCSZ < 4 || info.IORCSZ < 1 || info.CNTLID == 0 {
				t.Errorf("identify controller: %+v", info)
			}
			ids, err := c.Namespaces(ctx(t))
			if err != nil || len(ids) != 1 || ids[0] != 1 {
				t.Fatalf("namespaces %v, %v", ids, err)
			}
			ns, err := c.IdentifyNamespace(ctx(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			if ns.BlockSize != bs || ns.Blocks != uint64(64<<20/bs) {
				t.Fatalf("namespace %+v", ns)
			}
			// Writes and reads of several sizes at several places, checked
			// against the store itself.
			rng := rand.New(rand.NewPCG(1, uint64(bs)))
			for _, blocks := range []int{1, 3, 8, 32} {
				buf := make([]byte, blocks*bs)
				for i := range buf {
					buf[i] = byte(rng.Uint32())
				}
				lba := uint64(rng.IntN(int(ns.Blocks) - blocks))
				if err := c.Write(ctx(t), 1, lba, buf, bs); err != nil {
					t.Fatalf("write %d blocks at %d: %v", blocks, lba, err)
				}
				got := make([]byte, len(buf))
				f.store.ReadAt(got, int64(lba)*int64(bs))
				if !bytes.Equal(got, buf) {
					t.Fatalf("the store does not hold what %d blocks at %d wrote", blocks, lba)
				}
				clear(got)
				if err := c.Read(ctx(t), 1, lba, got, bs); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, buf) {
					t.Fatalf("read back of %d blocks at %d differs", blocks, lba)
				}
			}
			if err := c.Flush(ctx(t), 1); err != nil {
				t.Fatal(err)
			}
			if err := c.WriteZeroes(ctx(t), 1, 0, 4); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStatusCodes: out-of-range LBAs, unknown namespaces and oversized
// transfers get NVMe status codes, and the queue keeps working.
func TestStatusCodes(t *testing.T) {
	f := newFabric(t, nvmeof.TargetConfig{}, 4096)
	c, err := nvmeof.Connect(ctx(t), f.addr, testNQN, f.hostConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	blocks := uint64(64 << 20 / 4096)
	buf := make([]byte, 8192)
	for _, tc := range []struct {
		name string
		err  error
		want nvmeof.Status
	}{
		{"read past the end", c.Read(ctx(t), 1, blocks-1, buf, 4096), nvmeof.StatusLBARange},
		{"write past the end", c.Write(ctx(t), 1, blocks-1, buf, 4096), nvmeof.StatusLBARange},
		{"read at 2^64-1", c.Read(ctx(t), 1, ^uint64(0), buf, 4096), nvmeof.StatusLBARange},
		{"namespace 2", c.Read(ctx(t), 2, 0, buf, 4096), nvmeof.StatusInvalidNamespace},
		{"zeroes past the end", c.WriteZeroes(ctx(t), 1, blocks, 1), nvmeof.StatusLBARange},
	} {
		var st nvmeof.Status
		if !errors.As(tc.err, &st) || st.Code() != tc.want || st&nvmeof.StatusDNR == 0 {
			t.Errorf("%s: %v, want %v with DNR", tc.name, tc.err, tc.want)
		}
	}
	// A raw command with an opcode nobody serves.
	var cmd [nvmeof.CommandSize]byte
	cmd[0] = 0x7e
	binary.LittleEndian.PutUint32(cmd[4:], 1)
	_, err = c.Exec(ctx(t), false, cmd, nil, nil)
	var st nvmeof.Status
	if !errors.As(err, &st) || st.Code() != nvmeof.StatusInvalidOpcode {
		t.Errorf("opcode 0x7e: %v", err)
	}
	if err := c.Read(ctx(t), 1, 0, buf, 4096); err != nil {
		t.Fatalf("the queue after errors: %v", err)
	}
	if f.target.Stats.Errors.Load() < 6 {
		t.Errorf("target counted %d errors", f.target.Stats.Errors.Load())
	}
}

// TestQueueDepth: many goroutines at once over several I/O queues, each
// writing its own blocks and reading them back.
func TestQueueDepth(t *testing.T) {
	f := newFabric(t, nvmeof.TargetConfig{}, 4096)
	c, err := nvmeof.Connect(ctx(t), f.addr, testNQN, f.hostConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 48 {
		wg.Go(func() {
			buf, got := make([]byte, 4096), make([]byte, 4096)
			for i := range 20 {
				for j := range buf {
					buf[j] = byte(g*31 + i + j)
				}
				lba := uint64(g*64 + i)
				if err := c.Write(ctx(t), 1, lba, buf, 4096); err != nil {
					errs <- err
					return
				}
				if err := c.Read(ctx(t), 1, lba, got, 4096); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, got) {
					errs <- fmt.Errorf("goroutine %d: block %d differs", g, lba)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDiscovery(t *testing.T) {
	f := newFabric(t, nvmeof.TargetConfig{Subsystems: []*nvmeof.Subsystem{
		{NQN: testNQN, Namespaces: []*nvmeof.Namespace{{ID: 1, Store: nvmeof.NewMemoryStore(1 << 20)}}},
		{NQN: testNQN + "-private", AllowedHosts: []string{"nqn.2026-11.dev.softrdma:someone-else"}, Namespaces: []*nvmeof.Namespace{{ID: 1, Store: nvmeof.NewMemoryStore(1 << 20)}}},
	}}, 4096)
	entries, err := nvmeof.Discover(ctx(t), f.addr, f.hostConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].SubNQN != testNQN || entries[1].SubNQN != nvmeof.DiscoveryNQN || entries[0].Addr.String() != f.addr {
		t.Fatalf("discovery log %+v", entries)
	}
	// The subsystem this host may not use is not listed, and refuses it.
	_, err = nvmeof.Connect(ctx(t), f.addr, testNQN+"-private", f.hostConfig())
	var st nvmeof.Status
	if !errors.As(err, &st) || st.Code() != nvmeof.StatusConnectInvalidHost {
		t.Fatalf("connect to a subsystem that does not allow this host: %v", err)
	}
	_, err = nvmeof.Connect(ctx(t), f.addr, "nqn.2026-11.dev.softrdma:nothing", f.hostConfig())
	if !errors.As(err, &st) || st.Code() != nvmeof.StatusConnectInvalidParm {
		t.Fatalf("connect to an unknown subsystem: %v", err)
	}
}

// TestCMReject: queue requests the target cannot serve are refused in
// the CM exchange with the NVMe-oF status in the REJ's private data.
func TestCMReject(t *testing.T) {
	f := newFabric(t, nvmeof.TargetConfig{MaxQueueSize: 64, MaxIOQueues: 2}, 4096)
	for _, tc := range []struct {
		name string
		req  nvmeof.CMRequest
		want uint16
	}{
		{"record format 1", nvmeof.CMRequest{RecFmt: 1, HRQSize: 32, HSQSize: 31}, nvmeof.CMRejInvalidRecFmt},
		{"SQ of 101", nvmeof.CMRequest{QID: 1, HRQSize: 101, HSQSize: 100}, nvmeof.CMRejInvalidHSQSize},
		{"RQ smaller than the SQ", nvmeof.CMRequest{QID: 1, HRQSize: 8, HSQSize: 31}, nvmeof.CMRejInvalidHRQSize},
		{"queue 3 of 2", nvmeof.CMRequest{QID: 3, HRQSize: 32, HSQSize: 31}, nvmeof.CMRejInvalidQID},
	} {
		pd, _ := tc.req.AppendBinary(nil)
		_, err := cm.Dial(ctx(t), "rdma", f.addr, &cm.Options{Context: f.hdev, PrivateData: pd})
		var rej *cm.RejectError
		if !errors.As(err, &rej) || len(rej.PrivateData) < 4 || binary.LittleEndian.Uint16(rej.PrivateData[2:]) != tc.want {
			t.Errorf("%s: %v, want a REJ with status %d", tc.name, err, tc.want)
		}
	}
	if n := f.target.Stats.RejectedConns.Load(); n != 4 {
		t.Errorf("%d rejects counted, want 4", n)
	}
}

// TestKeepAliveTimeout: a host that stops sending loses its controller;
// a host that keeps sending keeps it.
func TestKeepAliveTimeout(t *testing.T) {
	f := newFabric(t, nvmeof.TargetConfig{}, 4096)
	cfg := f.hostConfig()
	cfg.KeepAlive = 400 * time.Millisecond
	cfg.ControllerLossTimeout = -1
	c, err := nvmeof.Connect(ctx(t), f.addr, testNQN, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(2 * time.Second)
	if n := f.target.Stats.KeepAliveLost.Load(); n != 0 {
		t.Fatalf("a host that sends Keep Alive lost its controller (%d)", n)
	}
	buf := make([]byte, 4096)
	if err := c.Read(ctx(t), 1, 0, buf, 4096); err != nil {
		t.Fatal(err)
	}
	// The host now tells the controller to expect Keep Alive every 100 ms
	// and keeps sending every 200 ms: the controller goes.
	var cmd [nvmeof.CommandSize]byte
	cmd[0] = nvmeof.AdminSetFeatures
	binary.LittleEndian.PutUint32(cmd[40:], nvmeof.FeatKeepAlive)
	binary.LittleEndian.PutUint32(cmd[44:], 100)
	if _, err := c.Exec(ctx(t), true, cmd, nil, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.target.Stats.KeepAliveLost.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a controller whose host sent Keep Alive too seldom was kept")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReconnect: the target goes away and comes back; the host's I/O
// resumes on a new controller.
func TestReconnect(t *testing.T) {
	f := newFabric(t, nvmeof.TargetConfig{}, 4096)
	cfg := f.hostConfig()
	cfg.ReconnectDelay = 100 * time.Millisecond
	c, err := nvmeof.Connect(ctx(t), f.addr, testNQN, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := bytes.Repeat([]byte{7}, 4096)
	if err := c.Write(ctx(t), 1, 5, buf, 4096); err != nil {
		t.Fatal(err)
	}
	first := c.Info().CNTLID
	// Drop every queue: the controller is gone, the listener stays.
	f.target.DisconnectAll()
	got := make([]byte, 4096)
	if err := c.Read(ctx(t), 1, 5, got, 4096); err != nil {
		t.Fatalf("read after the controller went away: %v", err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("data differs after reconnect")
	}
	if c.Info().CNTLID == first {
		t.Errorf("still controller %d after a reconnect", first)
	}
}

func BenchmarkRead4K(b *testing.B) {
	t := &testing.T{}
	_ = t
	f := newFabricB(b)
	c, err := nvmeof.Connect(context.Background(), f.addr, testNQN, f.hostConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	for b.Loop() {
		if err := c.Read(context.Background(), 1, 0, buf, 4096); err != nil {
			b.Fatal(err)
		}
	}
}

// TestIOZeroAllocs: in steady state a Read or Write, host and target
// together, allocates nothing.
func TestIOZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items")
	}
	f := newFabric(t, nvmeof.TargetConfig{}, 4096)
	c, err := nvmeof.Connect(ctx(t), f.addr, testNQN, f.hostConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	bg := context.Background()
	for name, op := range map[string]func() error{
		"Read":  func() error { return c.Read(bg, 1, 7, buf, 4096) },
		"Write": func() error { return c.Write(bg, 1, 7, buf, 4096) },
	} {
		var err error
		if n := testing.AllocsPerRun(500, func() {
			if e := op(); e != nil {
				err = e
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per I/O", name, n)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
