package nvmeof_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/nvmeof"
	"github.com/softrdma/softrdma/provider/shm"
)

// TestOverShm: the same target and host over the shared-memory provider.
func TestOverShm(t *testing.T) {
	tdev, err := shm.Open(shm.Config{})
	if err != nil {
		t.Skipf("shm: %v", err)
	}
	hdev, err := shm.Open(shm.Config{})
	if err != nil {
		tdev.Close()
		t.Fatal(err)
	}
	store := nvmeof.NewMemoryStore(16 << 20)
	target, err := nvmeof.NewTarget(nvmeof.TargetConfig{Subsystems: []*nvmeof.Subsystem{{NQN: testNQN, Namespaces: []*nvmeof.Namespace{{ID: 1, Store: store}}}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(20000))
	ln, err := cm.Listen("rdma", addr, &cm.Options{Context: tdev})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { target.Serve(context.Background(), ln); close(served) }()
	defer func() {
		target.Close()
		<-served
		target.Wait()
		cm.Detach(hdev)
		cm.Detach(tdev)
		hdev.Close()
		tdev.Close()
	}()
	c, err := nvmeof.Connect(ctx(t), addr, testNQN, &nvmeof.HostConfig{CM: &cm.Options{Context: hdev}, IOQueues: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := bytes.Repeat([]byte("softrdma"), 8192)
	if err := c.Write(ctx(t), 1, 3, buf, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if err := c.Read(ctx(t), 1, 3, got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("read back differs over shm")
	}
}

// BenchmarkShmRead4KQD32: 4 KiB reads from a memory namespace over shm,
// 32 in flight over 2 queues, target and host in this process; for
// profiles of the data path (bench/nvme measures two processes).
func BenchmarkShmRead4KQD32(b *testing.B) {
	tdev, err := shm.Open(shm.Config{})
	if err != nil {
		b.Skipf("shm: %v", err)
	}
	hdev, _ := shm.Open(shm.Config{})
	defer tdev.Close()
	defer hdev.Close()
	target, _ := nvmeof.NewTarget(nvmeof.TargetConfig{Subsystems: []*nvmeof.Subsystem{{NQN: testNQN, Namespaces: []*nvmeof.Namespace{{ID: 1, Store: nvmeof.NewMemoryStore(64 << 20)}}}}})
	addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(20000))
	ln, err := cm.Listen("rdma", addr, &cm.Options{Context: tdev})
	if err != nil {
		b.Fatal(err)
	}
	go target.Serve(context.Background(), ln)
	defer func() { target.Close(); target.Wait() }()
	c, err := nvmeof.Connect(context.Background(), addr, testNQN, &nvmeof.HostConfig{CM: &cm.Options{Context: hdev}, IOQueues: 2, QueueSize: 17})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		lba := uint64(rand.IntN(16000))
		for pb.Next() {
			if err := c.Read(context.Background(), 1, lba, buf, 4096); err != nil {
				b.Error(err)
				return
			}
			lba = (lba + 7) % 16000
		}
	})
}
