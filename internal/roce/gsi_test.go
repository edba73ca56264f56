package roce

import (
	"bytes"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestGSI: a MAD sent from QP1 of one device reaches the handler of the
// other's QP1 with the sender's GID and QP1 as its source; a MAD with the
// wrong Q_Key, or with no handler installed, is dropped and counted.
func TestGSI(t *testing.T) {
	ta, tb := udpPair(t)
	a, b := newDevice(t, Config{Transport: ta}), newDevice(t, Config{Transport: tb})
	go serve(a, ta)
	go serve(b, tb)
	defer a.Close()
	defer b.Close()
	type got struct {
		src verbs.MADSource
		mad []byte
	}
	ch := make(chan got, 4)
	must(t, b.HandleMADs(1, func(src verbs.MADSource, mad []byte) { ch <- got{src, bytes.Clone(mad)} }))
	mad := make([]byte, 256)
	mad[0], mad[1], mad[2], mad[3] = 1, 7, 2, 3 // base version, class CM, class version, method Send
	bg, _ := b.QueryGID(1, 1)
	ag, _ := a.QueryGID(1, 1)
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, mad))
	select {
	case g := <-ch:
		if g.src.GID != ag || g.src.QPN != 1 || !bytes.Equal(g.mad, mad) {
			t.Fatalf("received %+v, %d bytes; want from %v QP1 the MAD sent", g.src, len(g.mad), ag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no MAD arrived")
	}
	must(t, a.SendMAD(1, bg, 1, 0x1234, mad)) // wrong Q_Key
	must(t, b.HandleMADs(1, nil))
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, mad)) // no handler
	deadline := time.Now().Add(5 * time.Second)
	for b.Counters.DropQKey.Load() != 1 || b.Counters.DropNoMADHandler.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("drops: qkey %d, no handler %d; want 1 and 1", b.Counters.DropQKey.Load(), b.Counters.DropNoMADHandler.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if len(ch) != 0 {
		t.Fatal("a MAD that should have been dropped was delivered")
	}
}
