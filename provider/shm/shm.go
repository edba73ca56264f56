// Package shm is softrdma's shared-memory provider: the verbs API between
// processes on one host, with RDMA WRITE and READ as one memcpy into or
// out of the peer's memory and atomics as the CPU's atomics on the shared
// word.
//
// Open creates a device; each process opens its own:
//
//	dev, err := shm.Open(shm.Config{})
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//
// A device listens on a Unix socket (in the abstract namespace, or in
// Config.Dir) whose name its GID encodes, so a cm.Endpoint (QPN, PSN, GID)
// names a peer process's QP and cm.Connect brings an RC QP pair up exactly
// as over RoCEv2: exchange endpoints by any channel, call Connect on both
// sides. The connection manager works too: a Device has a QP1 (verbs.GSI)
// whose MADs travel over its socket, and a host-wide directory of rdma_cm
// ports (verbs.ServiceDirectory), so cm.Listen("rdma", "127.0.0.1:7471",
// &cm.Options{Context: dev}) in one process and cm.Dial with the same
// address in another connect them. See docs/shm.md for the design and
// the figures.
//
// Memory a peer may access must come from AllocMR: it lives in a sealed
// memfd that a peer maps only after presenting a valid rkey for a region
// with the matching remote access. RegMR of Go memory works too: peers'
// WRITEs, READs and atomics on it are messages the owner applies, a copy
// through the owner's CPU and a socket round trip each (see docs/shm.md
// for the cost).
//
// The package registers a verbs.Provider named "shm" listing a device
// "shm0" (opening it is shm.Open(Config{})) and the devices this process
// opened. On systems other than Linux, Open returns verbs.ErrNotSupported
// and the provider lists nothing.
package shm

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// DefaultName is the name of the device the provider lists.
const DefaultName = "shm0"

// Config says how a device meets its peers. The zero value is the
// default: abstract socket namespace, peers of the same user only.
type Config struct {
	// Name is the device name; default "shm0".
	Name string
	// Dir, if set, is a directory the device's socket lives in (one file
	// per device, removed on Close), and the sockets of the services it
	// binds for cm; peers must use the same Dir. Empty means the Linux
	// abstract socket namespace, which needs no directory but is shared by
	// the whole network namespace, without permissions: any user can bind
	// a service's name first (lookups then refuse the squatter, and
	// BindService names it). A Dir that only the trusted users can write
	// keeps names private. The uid check below applies either way.
	Dir string
	// AllowUIDs lists other user IDs whose processes may connect. By
	// default only processes of the same user can reach this device's
	// regions (SO_PEERCRED checked on every connection, both ways).
	AllowUIDs []uint32
}

type provider struct{}

func (provider) Name() string { return "shm" }

func init() { verbs.Register(provider{}) }

// SpinHint is how long a consumer that blocks when idle (rdmanet's Read
// and Write) should poll this device's CQs before it sleeps: a few of its
// microsecond round trips, and little enough that a poller that yields
// as it polls does not keep a server's other goroutines waiting.
func (d *Device) SpinHint() time.Duration { return 25 * time.Microsecond }
