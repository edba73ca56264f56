package cm

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// settlingDev is a fake device whose receive path, like a real one's,
// hands a MAD to the agent at once while an ACK that arrived ahead of it
// may still wait for its QP (a busy poller holds the receive lock, or
// over shm the progress pass skipped the QP): SettleQP processes it.
type settlingDev struct {
	*fakeDev
	mu         sync.Mutex
	ackWaiting bool     // an ACK reached the device, its QP has not taken it
	acked      bool     // the QP took it: the SEND's completion is in the CQ
	log        []string // settle (with the QP's state) and CM MADs sent, in order
}

func (d *settlingDev) SettleQP(qp verbs.QP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ackWaiting {
		d.ackWaiting, d.acked = false, true
	}
	d.log = append(d.log, "settle "+qp.State().String())
}

func (d *settlingDev) SendMAD(port uint8, dst verbs.GID, dstQP, qkey uint32, mad []byte) error {
	d.mu.Lock()
	switch wire.CMAttr(wire.MAD(mad).AttrID()) {
	case wire.CMDReqAttr:
		d.log = append(d.log, "DREQ")
	case wire.CMDRepAttr:
		d.log = append(d.log, "DREP")
	}
	d.mu.Unlock()
	return d.fakeDev.SendMAD(port, dst, dstQP, qkey, mad)
}

// TestDisconnectAfterPrecedingPackets: the peer took our last SEND and
// disconnected at once. Its ACK reached our device ahead of its DREQ but
// our QP had not processed it when the agent got the DREQ; the
// connection must end (Done, which makes a waiter give up on the SEND)
// only once the device settled the QP, so the SEND shows as taken. And
// the disconnecting side settles its QP after moving it to ERR and before
// its DREQ leaves, so the ACK it owes goes first.
func TestDisconnectAfterPrecedingPackets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newFakeNet()
		cliDev := &settlingDev{fakeDev: n.newDev("cli", "10.0.0.1")}
		srvDev := &settlingDev{fakeDev: n.newDev("srv", "10.0.0.2")}
		t.Cleanup(func() { Detach(cliDev); Detach(srvDev) })
		l, err := Listen("rdma", "10.0.0.2:7174", &Options{Context: srvDev})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		srvC := serve(t, l, false)
		cli, err := Dial(context.Background(), "rdma", "10.0.0.2:7174", &Options{Context: cliDev, PrivateData: []byte("ping")})
		if err != nil {
			t.Fatal(err)
		}
		srv := <-srvC
		if srv == nil {
			t.Fatal("accept failed")
		}
		srvDev.mu.Lock()
		srvDev.ackWaiting = true
		srvDev.mu.Unlock()
		cli.Close()
		<-srv.Done()
		srvDev.mu.Lock()
		acked := srvDev.acked
		srvDev.mu.Unlock()
		if !acked {
			t.Error("the connection ended before the device processed the ACK that arrived ahead of the DREQ")
		}
		if !errors.Is(srv.Err(), ErrDisconnected) {
			t.Errorf("server Err %v, want ErrDisconnected", srv.Err())
		}
		synctest.Wait()
		cliDev.mu.Lock()
		log := slices.Clone(cliDev.log)
		cliDev.mu.Unlock()
		if i := slices.Index(log, "settle ERR"); i < 0 || i > slices.Index(log, "DREQ") {
			t.Errorf("the disconnecting side did %q; want its QP in ERR settled before the DREQ", log)
		}
		srv.Close()
	})
}
