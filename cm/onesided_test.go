package cm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// oneSided is a connection whose server offers a 4 KiB region with
// remote read, write and atomic access.
type oneSided struct {
	cli, srv *cm.Conn
	remote   cm.RemoteBuffer // the server's region
	srvMR    verbs.MR
	local    verbs.MR // the client's 4 KiB
}

func newOneSided(t *testing.T, a, b string) *oneSided {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	da, db := openPair(t, a, b)
	t.Cleanup(func() { da.Close(); db.Close() })
	ln, err := cm.Listen("rdma", b+":7471", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &oneSided{}
	done := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			done <- err
			return
		}
		pd, _ := req.Context().AllocPD()
		s.srvMR, err = pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		if err != nil {
			done <- err
			return
		}
		offer, _ := cm.RemoteBufferOf(s.srvMR).AppendBinary(nil)
		s.srv, err = req.Accept(ctx, &cm.Options{PD: pd, PrivateData: offer, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		done <- err
	}()
	s.cli, err = cm.Dial(ctx, "rdma", b+":7471", &cm.Options{Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.remote, _, err = cm.ParseRemoteBuffer(s.cli.PeerPrivateData); err != nil {
		t.Fatal(err)
	}
	if s.local, err = s.cli.PD.AllocMR(4096, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.local.Dereg(); s.cli.Close(); s.srv.Close(); s.srvMR.Dereg() })
	return s
}

func TestOneSided(t *testing.T) {
	s := newOneSided(t, "127.0.65.1", "127.0.65.2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := s.cli

	copy(s.local.Bytes(), "hello, one-sided world")
	if err := c.Write(ctx, s.local.SGE(0, 22), s.remote); err != nil {
		t.Fatal(err)
	}
	if got := string(s.srvMR.Bytes()[:22]); got != "hello, one-sided world" {
		t.Fatalf("the server's memory holds %q", got)
	}
	if err := c.Read(ctx, s.local.SGE(100, 5), s.remote); err != nil {
		t.Fatal(err)
	}
	if got := string(s.local.Bytes()[100:105]); got != "hello" {
		t.Fatalf("READ brought %q", got)
	}

	word, _ := s.remote.Slice(1024, 8)
	binary.LittleEndian.PutUint64(s.srvMR.Bytes()[1024:], 40)
	if old, err := c.FetchAndAdd(ctx, word, 2); err != nil || old != 40 {
		t.Fatalf("FetchAndAdd: %d, %v; want 40", old, err)
	}
	if old, err := c.CompareAndSwap(ctx, word, 42, 7); err != nil || old != 42 {
		t.Fatalf("CompareAndSwap: %d, %v; want 42", old, err)
	}
	if old, err := c.CompareAndSwap(ctx, word, 42, 9); err != nil || old != 7 {
		t.Fatalf("CompareAndSwap that must not swap: %d, %v; want 7", old, err)
	}
	if v := binary.LittleEndian.Uint64(s.srvMR.Bytes()[1024:]); v != 7 {
		t.Fatalf("the word is %d, want 7", v)
	}

	// Asynchronous: two in flight, waited in reverse order.
	var w, r cm.Op
	if err := c.PostWrite(&w, s.local.SGE(0, 5), s.remote); err != nil {
		t.Fatal(err)
	}
	if err := c.PostRead(&r, s.local.SGE(200, 8), word); err != nil {
		t.Fatal(err)
	}
	if err := c.PostRead(&r, s.local.SGE(200, 8), word); !errors.Is(err, cm.ErrOpInFlight) {
		t.Errorf("posting an Op in flight: %v, want ErrOpInFlight", err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var a cm.Op
	if err := c.PostFetchAndAdd(&a, word, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx); err != nil || a.Value() != 7 {
		t.Fatalf("PostFetchAndAdd: %d, %v", a.Value(), err)
	}

	// SEND into a posted receive.
	rmr, _ := s.srv.PD.AllocMR(64, verbs.AccessLocalWrite)
	defer rmr.Dereg()
	if err := s.srv.QP.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{rmr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	copy(s.local.Bytes(), "ping")
	if err := c.Send(ctx, s.local.SGE(0, 4)); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; n, _ = s.srv.RecvCQ.Poll(wc) {
		s.srv.RecvCQ.Wait(ctx)
	}
	if wc[0].Status != verbs.WCSuccess || string(rmr.Bytes()[:wc[0].ByteLen]) != "ping" {
		t.Fatalf("receive: %v %q", wc[0].Status, rmr.Bytes()[:wc[0].ByteLen])
	}
}

// TestOneSidedErrors: misuse is refused before anything is posted, and a
// failed completion is a *CompletionError that matches its status.
func TestOneSidedErrors(t *testing.T) {
	s := newOneSided(t, "127.0.65.3", "127.0.65.4")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := s.cli
	small, _ := s.remote.Slice(0, 4)
	if err := c.Write(ctx, s.local.SGE(0, 8), small); err == nil {
		t.Error("a WRITE longer than the remote buffer was posted")
	}
	if _, err := c.FetchAndAdd(ctx, small, 1); err == nil {
		t.Error("an atomic on 4 bytes was posted")
	}
	odd, _ := s.remote.Slice(4, 8)
	if _, err := c.CompareAndSwap(ctx, odd, 0, 1); err == nil {
		t.Error("an atomic on an unaligned word was posted")
	}
	bad := s.remote
	bad.RKey ^= 0x5a5a
	err := c.Write(ctx, s.local.SGE(0, 8), bad)
	var ce *cm.CompletionError
	if !errors.As(err, &ce) || !errors.Is(err, verbs.WCRemAccessErr) || ce.Op != verbs.WRRDMAWrite {
		t.Fatalf("WRITE with a wrong rkey: %v; want a CompletionError with remote access error", err)
	}
	t.Log(err)
	// The QP is in the error state now: what follows is flushed.
	if err := c.Read(ctx, s.local.SGE(0, 8), s.remote); err != nil && !errors.Is(err, verbs.WCWRFlushErr) && !errors.Is(err, cm.ErrQPError) {
		t.Logf("READ after the failure: %v", err)
	}
}

// TestOneSidedConcurrent: goroutines share a connection; every
// operation is waited by its own caller, whoever polls.
func TestOneSidedConcurrent(t *testing.T) {
	s := newOneSided(t, "127.0.65.5", "127.0.65.6")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	word, _ := s.remote.Slice(0, 8)
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	seen := make([]map[uint64]bool, goroutines)
	for g := range goroutines {
		seen[g] = map[uint64]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				old, err := s.cli.FetchAndAdd(ctx, word, 1)
				if err != nil {
					t.Error(err)
					return
				}
				seen[g][old] = true
			}
		}()
	}
	wg.Wait()
	all := map[uint64]bool{}
	for _, m := range seen {
		for v := range m {
			if all[v] {
				t.Fatalf("two adds saw %d", v)
			}
			all[v] = true
		}
	}
	if v := binary.LittleEndian.Uint64(s.srvMR.Bytes()); v != goroutines*each || len(all) != goroutines*each {
		t.Fatalf("the word is %d after %d adds (%d distinct results)", v, goroutines*each, len(all))
	}
}

// TestOneSidedZeroAllocs: in the steady state the blocking and the
// asynchronous calls allocate nothing.
func TestOneSidedZeroAllocs(t *testing.T) {
	s := newOneSided(t, "127.0.65.7", "127.0.65.8")
	ctx := context.Background()
	c := s.cli
	word, _ := s.remote.Slice(0, 8)
	var op cm.Op
	for name, f := range map[string]func() error{
		"Write": func() error { return c.Write(ctx, s.local.SGE(0, 64), s.remote) },
		"Read":  func() error { return c.Read(ctx, s.local.SGE(0, 64), s.remote) },
		"FetchAndAdd": func() error {
			_, err := c.FetchAndAdd(ctx, word, 1)
			return err
		},
		"CompareAndSwap": func() error {
			_, err := c.CompareAndSwap(ctx, word, 0, 0)
			return err
		},
		"PostWrite+Wait": func() error {
			if err := c.PostWrite(&op, s.local.SGE(0, 64), s.remote); err != nil {
				return err
			}
			return op.Wait(ctx)
		},
	} {
		var err error
		if n := testing.AllocsPerRun(200, func() {
			if e := f(); e != nil {
				err = e
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
