// Package replay is a test helper shared by the out-of-band exchange tests
// (internal/pingpong, internal/perftest): a TCP reassembler over the
// segments internal/pcapfile reads and a scripted net.Conn, so an exchange
// can be replayed against captures of the real programs.
package replay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/pcapfile"
)

// Event is one run of payload bytes in one direction, in capture order.
type Event struct {
	FromClient bool
	Data       []byte
}

// LoadTCP returns the payload events of the first TCP connection to port in
// a pcap or pcapng capture (read by internal/pcapfile), with retransmitted
// bytes removed and consecutive same-direction segments merged.
func LoadTCP(t testing.TB, path string, port uint16) []Event {
	t.Helper()
	segs, err := pcapfile.TCP(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		events          []Event
		nextSeq         [2]uint32 // [0] client→server, [1] server→client
		haveSeq         [2]bool
		clientPort      uint16
		clientPortKnown bool
	)
	for _, sg := range segs {
		sport, dport, seq, payload := sg.SrcPort, sg.DstPort, sg.Seq, sg.Payload
		var dir int
		switch {
		case dport == port:
			dir = 0
			if !clientPortKnown {
				clientPort, clientPortKnown = sport, true
			}
			if sport != clientPort {
				continue
			}
		case sport == port && clientPortKnown && dport == clientPort:
			dir = 1
		default:
			continue
		}
		if sg.SYN {
			nextSeq[dir], haveSeq[dir] = seq+1, true
			continue
		}
		if !haveSeq[dir] {
			nextSeq[dir], haveSeq[dir] = seq, true
		}
		if len(payload) == 0 {
			continue // pure ACK (or FIN/RST): nothing to replay
		}
		// Keep only bytes not seen before (drop retransmissions).
		if d := int32(nextSeq[dir] - seq); d > 0 {
			if int(d) >= len(payload) {
				payload = nil
			} else {
				payload = payload[d:]
			}
		} else if d < 0 {
			t.Fatalf("%s: gap in TCP stream (missing %d bytes)", path, -d)
		}
		if len(payload) == 0 {
			continue
		}
		nextSeq[dir] += uint32(len(payload))
		FromClient := dir == 0
		if n := len(events); n > 0 && events[n-1].FromClient == FromClient {
			events[n-1].Data = append(events[n-1].Data, payload...)
		} else {
			events = append(events, Event{FromClient: FromClient, Data: append([]byte(nil), payload...)})
		}
	}
	if len(events) == 0 {
		t.Fatalf("%s: no TCP payload on port %d", path, port)
	}
	return events
}

// stream returns the concatenated bytes one side sent.
func Stream(events []Event, FromClient bool) []byte {
	var b []byte
	for _, e := range events {
		if e.FromClient == FromClient {
			b = append(b, e.Data...)
		}
	}
	return b
}

var errWouldBlock = errors.New("replay: read would block: the capture shows the peer waiting for our bytes first")

// ScriptConn plays the peer of one side of a captured conversation. A peer
// byte becomes readable only once this side has written everything it wrote
// before that byte in the capture, so a reordered exchange fails instead of
// passing by luck. Writes are recorded for comparison with the capture.
//
// Symmetrically, each byte we write must come after the peer bytes that
// precede it in the capture have been read, except for the peer's last
// unreadTail bytes, which the side under test never reads (perftest's final
// "done"). A violation is kept in early and reported by CheckWritten.
type ScriptConn struct {
	Peer     []byte
	Need     []int // need[i]: our bytes that must be written before peer[i] is readable
	NeedRead []int // needRead[i]: peer bytes that must be read before our byte i is written
	ReadPos  int
	Written  []byte
	Early    error
}

func NewScriptConn(events []Event, asClient bool, unreadTail int) *ScriptConn {
	c := &ScriptConn{}
	total := 0
	for _, e := range events {
		if e.FromClient != asClient {
			total += len(e.Data)
		}
	}
	ours := 0
	for _, e := range events {
		if e.FromClient == asClient {
			for range e.Data {
				c.NeedRead = append(c.NeedRead, min(len(c.Peer), total-unreadTail))
			}
			ours += len(e.Data)
			continue
		}
		for range e.Data {
			c.Need = append(c.Need, ours)
		}
		c.Peer = append(c.Peer, e.Data...)
	}
	return c
}

func (c *ScriptConn) Read(p []byte) (int, error) {
	if c.ReadPos >= len(c.Peer) {
		return 0, io.EOF
	}
	if len(c.Written) < c.Need[c.ReadPos] {
		return 0, fmt.Errorf("%w (%d of %d bytes written)", errWouldBlock, len(c.Written), c.Need[c.ReadPos])
	}
	n := 0
	for n < len(p) && c.ReadPos < len(c.Peer) && len(c.Written) >= c.Need[c.ReadPos] {
		p[n] = c.Peer[c.ReadPos]
		n++
		c.ReadPos++
	}
	return n, nil
}

func (c *ScriptConn) Write(p []byte) (int, error) {
	if pos := len(c.Written); c.Early == nil && pos < len(c.NeedRead) && c.ReadPos < c.NeedRead[pos] {
		c.Early = fmt.Errorf("byte %d written after reading %d peer bytes; the capture shows it after %d", pos, c.ReadPos, c.NeedRead[pos])
	}
	c.Written = append(c.Written, p...)
	return len(p), nil
}

func (c *ScriptConn) Close() error                       { return nil }
func (c *ScriptConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *ScriptConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *ScriptConn) SetDeadline(time.Time) error        { return nil }
func (c *ScriptConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *ScriptConn) SetWriteDeadline(t time.Time) error { return nil }

// CheckWritten compares what the side under test wrote with the capture.
func CheckWritten(t testing.TB, c *ScriptConn, want []byte) {
	t.Helper()
	if c.Early != nil {
		t.Error(c.Early)
	}
	got := c.Written
	n := min(len(got), len(want))
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			lo := max(0, i-16)
			t.Fatalf("byte %d differs:\n got  %q\n want %q", i, got[lo:min(len(got), i+32)], want[lo:min(len(want), i+32)])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("wrote %d bytes, capture has %d; tail got %q want %q", len(got), len(want), got[n:], want[n:])
	}
}
