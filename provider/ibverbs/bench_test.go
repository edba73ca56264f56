//go:build ibverbs && cgo && linux

package ibverbs

import (
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// The cost of the crossing: ns per work request posted in a list (and
// completed), and ns per Poll.

func benchPost(b *testing.B, batch int, signalAll bool) {
	c := openOrSkip(b)
	a, peer := pair(b, c, verbs.QPTypeRC, 128)
	wrs := make([]verbs.SendWR, batch)
	sges := make([]verbs.SGE, batch)
	for i := range wrs {
		sges[i] = a.mr.SGE(i*64, 8)
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: sges[i : i+1], SendFlags: verbs.SendInline,
			RemoteAddr: peer.mr.Addr() + uint64(i*64), RKey: peer.mr.RKey()}
		if signalAll {
			wrs[i].SendFlags |= verbs.SendSignaled
		}
		if i+1 < batch {
			wrs[i].Next = &wrs[i+1]
		}
	}
	wrs[batch-1].SendFlags |= verbs.SendSignaled
	want := 1
	if signalAll {
		want = batch
	}
	wc := make([]verbs.WC, batch)
	polls := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := a.qp.PostSend(&wrs[0]); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < want; {
			n, err := a.cq.Poll(wc)
			if err != nil {
				b.Fatal(err)
			}
			got += n
			polls++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/wr")
	b.ReportMetric(float64(polls)/float64(b.N), "polls/op")
}

// One WRITE per post: a crossing per request.
func BenchmarkPostWrite1(b *testing.B) { benchPost(b, 1, true) }

// Lists of 16 WRITEs, the last signaled: one crossing per 16 requests.
func BenchmarkPostWriteList16(b *testing.B) { benchPost(b, 16, false) }

// Lists of 16 signaled WRITEs, their 16 completions polled in batches.
func BenchmarkPostPollList16(b *testing.B) { benchPost(b, 16, true) }

// Poll of an empty CQ: the cost of one crossing into ibv_poll_cq.
func BenchmarkPollEmpty(b *testing.B) {
	c := openOrSkip(b)
	cq, err := c.CreateCQ(64, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cq.Destroy()
	wc := make([]verbs.WC, 16)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cq.Poll(wc); err != nil {
			b.Fatal(err)
		}
	}
}
