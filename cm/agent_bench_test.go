package cm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// nullGSI is a verbs.GSI that drops what it sends.
type nullGSI struct{ sent int }

func (g *nullGSI) HandleMADs(uint8, func(verbs.MADSource, []byte)) error { return nil }
func (g *nullGSI) SendMAD(uint8, verbs.GID, uint32, uint32, []byte) error {
	g.sent++
	return nil
}

// holdConnections gives a n established connections, as a server that
// accepted n clients has.
func holdConnections(a *agent, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		id := a.newIDLocked()
		id.state = stateEstablished
		id.peer = verbs.GIDFromAddr(netipAddr4(10, byte(i>>16), byte(i>>8), byte(i)))
		id.remoteID = randUint32() | 1
		a.remote[remoteKey{id: id.remoteID, guid: uint64(i), gid: id.peer}] = id
	}
}

// BenchmarkAgentREQ is the agent's cost for one connection request (the
// REQ handled, the request taken off the backlog and rejected, the next
// deadline computed as the agent's loop does after every MAD) with 0,
// 10k and 100k connections held: it should not grow with them.
func BenchmarkAgentREQ(b *testing.B) {
	for _, held := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			g := &nullGSI{}
			a := newAgent(nil, g, 1, time.Now)
			holdConnections(a, held)
			l := &Listener{a: a, serviceID: ServiceID(PortSpaceTCP, 7471), qpType: verbs.QPTypeRC, reqs: make(chan *ConnRequest, 1), closed: make(chan struct{})}
			a.listeners[l.serviceID] = l
			req := wire.CMReq{ServiceID: l.serviceID, LocalCAGUID: 0xc0ffee, LocalQPN: 0x1234, Transport: wire.CMTransportRC,
				LocalCMTimeout: 20, RemoteCMTimeout: 20, MaxCMRetries: 15, Primary: wire.CMPath{LocalACKTimeout: 19}}
			mad := newMAD(wire.CMReqAttr, 1)
			req.Encode(mad[wire.MADHeaderLen:])
			src := verbs.MADSource{GID: verbs.GIDFromAddr(netipAddr4(192, 168, 0, 1)), QPN: 1, PKey: 0xffff}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				binary.BigEndian.PutUint32(mad[wire.MADHeaderLen:], uint32(i)+1)
				a.mu.Lock()
				a.handleLocked(src, mad)
				a.mu.Unlock()
				r := <-l.reqs
				r.Reject(nil)
				a.mu.Lock()
				a.timeoutsLocked(a.now())
				a.mu.Unlock()
			}
		})
	}
}

func netipAddr4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }
