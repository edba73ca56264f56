package roce

import (
	"sync"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// sendLog is a UDP transport that records the opcodes of every Send call,
// counts the packets that came with a separate payload, and counts those
// that broke the gathering rule: a payload shorter than gatherMin is
// copied, never gathered (whether a longer one is depends on its
// request's length, gatherMinMessage, which a packet does not carry: the
// tests count those).
type sendLog struct {
	*udp.Transport
	mu         sync.Mutex
	calls      [][]wire.Opcode
	raw        [][]byte // every packet as sent (without its ICRC filled in)
	gathered   int
	misgathers int
}

func (s *sendLog) Send(pkts []transport.Datagram) (int, error) {
	ops := make([]wire.Opcode, len(pkts))
	g, bad := 0, 0
	for i, p := range pkts {
		ops[i] = wire.BTH(p.Buf).Opcode()
		n := len(p.Payload)
		if n > 0 {
			g++
		} else {
			var wp wire.Packet
			if wire.Parse(p.Buf, &wp) == nil {
				n = len(wp.Payload)
			}
		}
		if n < gatherMin && len(p.Payload) > 0 {
			bad++
		}
	}
	s.mu.Lock()
	for i := range pkts {
		if len(s.raw) < 4096 {
			b := make([]byte, pkts[i].Len())
			pkts[i].CopyTo(b)
			s.raw = append(s.raw, b)
		}
	}
	s.calls = append(s.calls, ops)
	s.gathered += g
	s.misgathers += bad
	s.mu.Unlock()
	return s.Transport.Send(pkts)
}

// counts returns the gathered packets and those against the rule.
func (s *sendLog) counts() (gathered, misgathers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gathered, s.misgathers
}

// realOpts are defaultOpts for tests over real sockets that count packets:
// a Local ACK Timeout of 16 (268 ms), so that a loaded machine does not
// make the requester retransmit.
func realOpts() qpOpts {
	o := defaultOpts()
	o.timeout = 16
	return o
}

// callsWith returns the Send calls that carried an ACK.
func (s *sendLog) callsWith(op wire.Opcode) [][]wire.Opcode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]wire.Opcode
	for _, c := range s.calls {
		for _, o := range c {
			if o == op {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (n *node) write(id uint64, off, length int) {
	n.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{n.mr.SGE(off, length)}, RemoteAddr: n.peer.mr.Addr() + uint64(off), RKey: n.peer.mr.RKey()})
}
