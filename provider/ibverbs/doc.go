// Package ibverbs is softrdma's provider for the kernel's RDMA devices:
// every device rdma-core's libibverbs lists (RoCE and InfiniBand NICs,
// iWARP NICs, Linux's soft-RoCE rxe and soft-iWARP siw) as a
// verbs.Context, so a program written against package verbs runs on real
// RDMA hardware unchanged.
//
// The provider uses cgo and is built only with the build tag ibverbs:
//
//	apt-get install libibverbs-dev   # rdma-core's headers and libibverbs.so
//	go build -tags ibverbs ./...
//
// Without the tag (or without cgo) the package compiles to a stub whose
// Open and Devices fail with verbs.ErrNotSupported and say how to build
// it, and the rest of softrdma stays pure Go.
//
// With the tag, the package registers a verbs.Provider named "ibverbs":
// verbs.Devices lists the kernel devices beside softrdma's own, and
// verbs.OpenDevice("rxe0") opens one. Open does the same with options.
//
// # The data path
//
// A post crosses into C once per chain of work requests, and a poll once
// per batch of completions: PostSend writes the whole chain into C memory
// the QP owns (allocated when the QP is created and reused) and one C
// call links it into an ibv_send_wr chain and calls ibv_post_send; Poll
// calls ibv_poll_cq once into an array the CQ owns and converts the
// completions in Go. Neither allocates.
//
// Completion channels and the context's asynchronous event file are made
// non-blocking and handed to Go's netpoller, so CQ.Wait and a goroutine
// waiting for events block no OS thread, and Wait honours its context.
// The CQs created with one verbs.CompChannel share one completion channel
// and one goroutine, and the CQs created without one share the context's.
//
// # Memory
//
// RegMR registers Go memory and pins it (runtime.Pinner) until Dereg, so
// the garbage collector never moves what the device reads and writes.
// AllocMR registers anonymous mmap'd memory outside the Go heap.
//
// # Handles for code that speaks C
//
// The C handles behind the objects (struct ibv_context, ibv_pd, ibv_cq,
// ibv_qp, ibv_srq, ibv_ah) are available as unsafe.Pointer through
// methods named CHandle, and a QP or context created by other C code
// (librdmacm's rdma_create_qp, an rdma_cm_id's verbs context) can be
// wrapped with WrapContext and PD.WrapQP, so a connection manager
// written with librdmacm hands its QPs to code that uses package verbs.
package ibverbs

import "github.com/softrdma/softrdma/verbs"

// ProviderName is the name of the verbs.Provider this package registers.
const ProviderName = "ibverbs"

// Config says which kernel device to open and how.
type Config struct {
	// Name is the device name as libibverbs lists it ("rxe0", "mlx5_0");
	// empty opens the first device.
	Name string
	// RelaxedOrdering registers every MR with
	// IBV_ACCESS_RELAXED_ORDERING, which lets a PCIe device reorder its
	// writes to the memory (faster on some platforms; the completion
	// still orders them). Devices without it ignore the flag, as
	// libibverbs treats it as optional.
	RelaxedOrdering bool
}

// GIDType is the type of a GID table entry (enum ibv_gid_type_sysfs).
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0 // InfiniBand (and iWARP devices, whose GID is their MAC)
	GIDTypeRoCEv1 GIDType = 1 // RoCE v1: Ethernet frames, EtherType 0x8915
	GIDTypeRoCEv2 GIDType = 2 // RoCE v2: UDP port 4791
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "GIDType(" + itoa(int(t)) + ")"
}

// GIDEntry is one entry of a port's GID table (struct ibv_gid_entry).
type GIDEntry struct {
	GID   verbs.GID
	Index int
	Port  uint8
	Type  GIDType
	// IfIndex is the network interface the entry belongs to (RoCE), 0 if
	// none.
	IfIndex int
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
