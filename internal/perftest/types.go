package perftest

import (
	"fmt"
	"strconv"

	"github.com/softrdma/softrdma/verbs"
)

// DefaultPort is perftest's TCP port for the out-of-band exchange.
const DefaultPort = 18515

// Version is the version string perftest 4.5-0.18 (Debian 12) sends; a
// Session sends it unless Config.Version says otherwise.
const Version = "6.06"

// MinPeerVersion is the oldest peer version perftest 4.5 accepts
// (check_version_compatibility); a Session refuses older peers the same way.
const MinPeerVersion = 5.70

// Verb is the RDMA operation a test measures. The values are perftest's
// VerbType.
type Verb int

// The perftest verbs.
const (
	Send   Verb = iota // ib_send_bw, ib_send_lat
	Write              // ib_write_bw, ib_write_lat
	Read               // ib_read_bw, ib_read_lat
	Atomic             // ib_atomic_bw, ib_atomic_lat
)

// String returns the name perftest prints in its banner ("RDMA_Write", ...).
func (v Verb) String() string {
	switch v {
	case Send:
		return "Send"
	case Write:
		return "RDMA_Write"
	case Read:
		return "RDMA_Read"
	case Atomic:
		return "Atomic"
	}
	return "Verb(" + strconv.Itoa(int(v)) + ")"
}

// RTTFactor is what perftest divides a latency sample by: 2 for WRITE and
// SEND, whose latency tests ping-pong and report half the round trip, 1 for
// READ and atomics, whose samples are one request/response.
func (v Verb) RTTFactor() int {
	if v == Read || v == Atomic {
		return 1
	}
	return 2
}

// Kind says whether a test measures bandwidth or latency.
type Kind int

// The test kinds. The values are perftest's TestType.
const (
	Lat Kind = iota // *_lat
	BW              // *_bw
)

// String returns "Latency" or "BW", as in perftest's banner.
func (k Kind) String() string {
	switch k {
	case Lat:
		return "Latency"
	case BW:
		return "BW"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Role is the side of the exchange: the server listens, the client connects
// and speaks first in every swap.
type Role int

// The roles. The values are perftest's MachineType.
const (
	Server Role = iota
	Client
)

// String returns "server" or "client".
func (r Role) String() string {
	switch r {
	case Server:
		return "server"
	case Client:
		return "client"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// AtomicOp is the operation of an atomic test (-A).
type AtomicOp int

// The atomic operations, in perftest's order.
const (
	CmpAndSwap AtomicOp = iota
	FetchAndAdd
)

// String returns perftest's name for the operation.
func (a AtomicOp) String() string {
	switch a {
	case CmpAndSwap:
		return "CMP_AND_SWAP"
	case FetchAndAdd:
		return "FETCH_AND_ADD"
	}
	return "AtomicOp(" + strconv.Itoa(int(a)) + ")"
}

// Connection is the transport a test uses (-c).
type Connection int

// The connection types, in perftest's order.
const (
	RC Connection = iota
	UC
	UD
	RawEth
	XRC
	DC
	SRD
)

// String returns perftest's name for the connection type.
func (c Connection) String() string {
	switch c {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	case RawEth:
		return "RawEth"
	case XRC:
		return "XRC"
	case DC:
		return "DC"
	case SRD:
		return "SRD"
	}
	return "Connection(" + strconv.Itoa(int(c)) + ")"
}

// MTU is an InfiniBand path MTU as the verbs enum ibv_mtu numbers it; that
// number, not the byte count, is what perftest exchanges. It is verbs.MTU,
// softrdma's one MTU type, named here so the exchange reads as perftest's.
type MTU = verbs.MTU

// The path MTUs.
const (
	MTU256  = verbs.MTU256
	MTU512  = verbs.MTU512
	MTU1024 = verbs.MTU1024
	MTU2048 = verbs.MTU2048
	MTU4096 = verbs.MTU4096
)

// MTUFromBytes returns the MTU of n bytes, which must be 256, 512, 1024,
// 2048 or 4096.
func MTUFromBytes(n int) (MTU, error) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, nil
		}
	}
	return 0, fmt.Errorf("perftest: %d is not an InfiniBand MTU (256, 512, 1024, 2048 or 4096)", n)
}

// Side says whose address a report line shows.
type Side int

// The sides of ctx_print_pingpong_data.
const (
	Local Side = iota
	Remote
)

// String returns "local" or "remote", as perftest prints them.
func (s Side) String() string {
	switch s {
	case Local:
		return "local"
	case Remote:
		return "remote"
	}
	return "Side(" + strconv.Itoa(int(s)) + ")"
}
