package cm

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

var cmAttrs = [...]wire.CMAttr{wire.CMReqAttr, wire.CMMRAAttr, wire.CMRejAttr, wire.CMRepAttr, wire.CMRTUAttr,
	wire.CMDReqAttr, wire.CMDRepAttr, wire.CMSIDRReqAttr, wire.CMSIDRRepAttr}

// FuzzAgent feeds the CM agent sequences of MADs from a hostile peer
// (with comm IDs, QPNs and service IDs drawn from what the agent holds,
// so the fuzzer reaches the matching paths), interleaved with time
// passing, the application answering requests and closing connections.
// The agent must never panic, and after every step its tables agree with
// each other, every deadline is in the heap, and the connections the
// real peer holds are still established unless the real peer's address
// spoke.
func FuzzAgent(f *testing.F) {
	f.Add([]byte{2, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 5, 1, 1, 1, 3, 9, 1, 40, 0, 0, 1, 0, 0})
	f.Add([]byte{0, 1, 0, 0, 1, 1, 1, 1, 10, 0, 2, 1, 1, 1, 11, 0, 9, 2, 200, 6, 2, 1, 1})
	f.Add([]byte{7, 2, 0, 0, 1, 8, 2, 0, 0, 3, 0, 1, 1, 4, 2, 1, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		now := time.Unix(1e9, 0)
		g := &nullGSI{}
		a := newAgent(nil, g, 1, func() time.Time { return now })
		peer := verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1"))
		srcs := [...]verbs.GID{verbs.GIDFromAddr(netip.MustParseAddr("10.6.6.6")), verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.2")), peer}
		l := &Listener{a: a, serviceID: ServiceID(PortSpaceTCP, 80), qpType: verbs.QPTypeRC, reqs: make(chan *ConnRequest, 4), closed: make(chan struct{})}
		ul := &Listener{a: a, serviceID: ServiceID(PortSpaceUDP, 81), qpType: verbs.QPTypeUD, reqs: make(chan *ConnRequest, 4), closed: make(chan struct{})}
		a.listeners[l.serviceID], a.listeners[ul.serviceID] = l, ul

		// The victims: an active and a passive connection with the peer,
		// and a dial in progress to it.
		var victims []*cmID
		a.mu.Lock()
		for i, passive := range []bool{false, true} {
			id := a.newIDLocked()
			id.state, id.peer, id.passive = stateEstablished, peer, passive
			id.remoteID, id.localQPN, id.remoteQPN, id.ackTimeout = 0x1000+uint32(i), 0x2000+uint32(i), 0x3000+uint32(i), 19
			id.timeout = time.Second
			if passive {
				id.rkey, id.hasRkey = remoteKey{id: id.remoteID, guid: 7, gid: peer}, true
				a.remote[id.rkey] = id
			}
			victims = append(victims, id)
		}
		dialing := a.newIDLocked()
		dialing.state, dialing.peer, dialing.localQPN, dialing.ackTimeout = stateReqSent, peer, 0x2100, 19
		a.sendRetriedLocked(dialing, newMAD(wire.CMReqAttr, dialing.tid), time.Second, 3)
		a.mu.Unlock()

		peerSpoke := false
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		// pick returns an ID the agent holds (local or remote), or one from the input.
		pick := func(sel byte, remote bool) uint32 {
			a.mu.Lock()
			defer a.mu.Unlock()
			i := int(sel)
			for _, id := range a.ids {
				if i == 0 {
					if remote {
						return id.remoteID
					}
					return id.localID
				}
				i--
			}
			return uint32(sel) << 8
		}
		for len(in) > 0 {
			op := next() % 12
			switch {
			case op < 9:
				src := srcs[int(next())%len(srcs)]
				if src == peer {
					peerSpoke = true
				}
				attr := cmAttrs[op]
				mad := newMAD(attr, uint64(next()))
				data := mad[wire.MADHeaderLen:]
				n := int(next()) % 32
				for i := 8; i < 8+n && len(in) > 0; i++ {
					data[i] = next()
				}
				binary.BigEndian.PutUint32(data[0:], pick(next(), true))
				binary.BigEndian.PutUint32(data[4:], pick(next(), false))
				switch attr {
				case wire.CMReqAttr:
					binary.BigEndian.PutUint64(data[4:], l.serviceID) // REQ: service ID after the comm ID
				case wire.CMSIDRReqAttr:
					binary.BigEndian.PutUint64(data[8:], ul.serviceID)
				case wire.CMDReqAttr:
					if next()&1 == 0 {
						data[8], data[9], data[10] = 0, 0x20, next()&1
					}
				}
				a.mu.Lock()
				a.handleLocked(verbs.MADSource{GID: src, QPN: 1, PKey: 0xffff}, mad)
				a.mu.Unlock()
			case op == 9:
				now = now.Add(time.Duration(next()) * 100 * time.Millisecond)
				a.mu.Lock()
				a.timeoutsLocked(now)
				a.mu.Unlock()
			case op == 10:
				select {
				case r := <-l.reqs:
					r.Reject(nil)
				case r := <-ul.reqs:
					r.Reject(nil)
				default:
				}
			case op == 11:
				a.mu.Lock()
				for _, id := range a.ids {
					if id.state == stateEstablished && !(id.peer == peer && !peerSpoke) {
						id.state = stateDReqSent
						a.sendRetriedLocked(id, newMAD(wire.CMDReqAttr, id.tid), id.timeout, 2)
						break
					}
				}
				a.mu.Unlock()
			}
			checkAgent(t, a)
			a.mu.Lock()
			for _, id := range a.ids { // the API goroutines take their events
				for len(id.ev) > 0 {
					<-id.ev
				}
			}
			a.mu.Unlock()
		}
		if !peerSpoke {
			for _, id := range victims {
				if id.state != stateEstablished {
					t.Fatalf("a connection with the peer went to %v without a MAD from the peer's address", id.state)
				}
			}
		}
	})
}

// checkAgent checks that the agent's tables agree.
func checkAgent(t *testing.T, a *agent) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, id := range a.ids {
		if id.localID != k || id.state == stateIdle {
			t.Fatalf("ids[%#x] holds comm ID %#x in %v", k, id.localID, id.state)
		}
		if !id.deadline.IsZero() {
			found := false
			for _, e := range a.deadlines {
				if e.id == id && e.at.Equal(id.deadline) {
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("comm ID %#x (%v) has a deadline that is not in the heap", k, id.state)
			}
		}
	}
	for k, id := range a.remote {
		if a.ids[id.localID] != id || !id.hasRkey || id.rkey != k {
			t.Fatalf("remote[%+v] holds comm ID %#x, not in ids or keyed otherwise", k, id.localID)
		}
	}
	for k, id := range a.sidr {
		if a.ids[id.localID] != id || !id.hasSIDRKey || id.sidrKey != k {
			t.Fatalf("sidr[%+v] holds comm ID %#x, not in ids or keyed otherwise", k, id.localID)
		}
	}
	if len(a.deadlines) > 2*len(a.ids)+65 {
		t.Fatalf("%d deadlines for %d comm IDs", len(a.deadlines), len(a.ids))
	}
}
