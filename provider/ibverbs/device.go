//go:build ibverbs && cgo && linux

package ibverbs

/*
#include "sr.h"
*/
import "C"

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// Enabled reports whether the package was built with the provider
// (build tag ibverbs, cgo, Linux). In this build it was.
const Enabled = true

func init() { verbs.Register(provider{}) }

type provider struct{}

func (provider) Name() string { return ProviderName }

func (provider) Devices() ([]verbs.Device, error) {
	ds, err := Devices()
	if err != nil {
		// No kernel RDMA stack (no /sys/class/infiniband) is no device,
		// not an error that hides the other providers' devices.
		return nil, nil
	}
	return ds, nil
}

// Device is a kernel RDMA device as ibv_get_device_list lists it.
type Device struct {
	name      string
	guid      uint64
	nodeType  int
	transport int
}

// Devices lists the kernel's RDMA devices (ibv_get_device_list).
func Devices() ([]verbs.Device, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, errnoErr("ibverbs.Devices", err, "ibv_get_device_list")
	}
	defer C.ibv_free_device_list(list)
	devs := make([]verbs.Device, 0, int(n))
	for _, d := range unsafe.Slice(list, int(n)) {
		devs = append(devs, &Device{
			name:      C.GoString(C.ibv_get_device_name(d)),
			guid:      beToHost64(uint64(C.ibv_get_device_guid(d))),
			nodeType:  int(d.node_type),
			transport: int(d.transport_type),
		})
	}
	return devs, nil
}

// Name is the kernel's name of the device ("rxe0", "mlx5_0").
func (d *Device) Name() string { return d.name }

// GUID is the node GUID.
func (d *Device) GUID() uint64 { return d.guid }

// Transport names the device's transport: "InfiniBand" (IB and RoCE),
// "iWARP", or "unknown".
func (d *Device) Transport() string {
	switch d.transport {
	case C.IBV_TRANSPORT_IB:
		return "InfiniBand"
	case C.IBV_TRANSPORT_IWARP:
		return "iWARP"
	}
	return "unknown"
}

// Open opens the device.
func (d *Device) Open() (verbs.Context, error) {
	c, err := Open(Config{Name: d.name})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func beToHost64(v uint64) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	return binary.BigEndian.Uint64(b[:])
}

// Context is an open kernel device (struct ibv_context). It implements
// verbs.Context, verbs.AsyncEventer and verbs.CloseNotifier, and is safe
// for concurrent use.
type Context struct {
	verbs.CloseHooks
	dev   *Device
	cfg   Config
	ctx   *C.struct_ibv_context
	owned bool // Close closes ctx (false for WrapContext)
	attr  verbs.DeviceAttr
	link  verbs.LinkLayer // port 1's

	events    verbsobj.Events
	asyncFile *os.File
	asyncDone chan struct{}

	mu      sync.Mutex
	objs    map[unsafe.Pointer]object // every live object by its C handle
	qps     map[uint32]*QP            // the live QPs by number
	closed  atomic.Bool
	closeMu sync.Mutex // serialises Close

	chMu  sync.Mutex                          // guards chans
	chans map[*verbs.CompChannel]*compChannel // the completion channels in use (channel.go)
}

// object is what Close must destroy if the application did not.
type object interface {
	order() int // destroy order: lower first
	forceDestroy()
}

// Open opens the kernel device cfg.Name (the first one if empty).
func Open(cfg Config) (*Context, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		// ENOSYS: the kernel has no RDMA stack (no
		// /sys/class/infiniband), so no device of any name.
		return nil, verbs.Errorf("ibverbs.Open", verbs.ErrNotFound, "the kernel offers no RDMA devices: ibv_get_device_list: %v (load the RDMA modules and a driver, or create a soft device: rdma link add rxe0 type rxe netdev eth0)", err)
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		name := C.GoString(C.ibv_get_device_name(d))
		names = append(names, name)
		if cfg.Name != "" && name != cfg.Name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, errnoErr("ibverbs.Open", err, "ibv_open_device("+name+")")
		}
		dev := &Device{name: name, guid: beToHost64(uint64(C.ibv_get_device_guid(d))),
			nodeType: int(d.node_type), transport: int(d.transport_type)}
		c, err2 := newContext(dev, ctx, cfg, true)
		if err2 != nil {
			C.ibv_close_device(ctx)
			return nil, err2
		}
		return c, nil
	}
	if cfg.Name == "" {
		return nil, verbs.Errorf("ibverbs.Open", verbs.ErrNotFound, "the kernel lists no RDMA devices (load a driver, or create one: rdma link add rxe0 type rxe netdev eth0)")
	}
	return nil, verbs.Errorf("ibverbs.Open", verbs.ErrNotFound, "no kernel RDMA device named %q (devices: %v)", cfg.Name, names)
}

func newContext(dev *Device, ctx *C.struct_ibv_context, cfg Config, owned bool) (*Context, error) {
	c := &Context{dev: dev, cfg: cfg, ctx: ctx, owned: owned, objs: map[unsafe.Pointer]object{}, qps: map[uint32]*QP{}}
	var err error
	if c.attr, err = c.queryDevice(); err != nil {
		return nil, err
	}
	if pa, err := c.QueryPort(1); err == nil {
		c.link = pa.LinkLayer
	}
	c.events.Init()
	fd := C.sr_nonblock_dup(ctx.async_fd)
	if fd < 0 {
		return nil, verbs.Errorf("ibverbs.Open", verbs.ErrInvalidArgument, "cannot make the async event file non-blocking")
	}
	c.asyncFile = os.NewFile(uintptr(fd), "ibv-async-"+dev.name)
	raw, err := c.asyncFile.SyscallConn()
	if err != nil {
		c.asyncFile.Close()
		return nil, verbs.Errorf("ibverbs.Open", verbs.ErrInvalidArgument, "async event file: %v", err)
	}
	c.asyncDone = make(chan struct{})
	go c.asyncLoop(raw)
	return c, nil
}

// asyncLoop reads the context's asynchronous events in Go's netpoller
// and delivers them on the AsyncEvents channel.
func (c *Context) asyncLoop(raw syscall.RawConn) {
	defer close(c.asyncDone)
	var ev C.struct_sr_async
	for {
		got := 0
		err := raw.Read(func(uintptr) bool {
			got = int(C.sr_get_async_event(c.ctx, &ev))
			return got != 0
		})
		if err != nil || got < 0 {
			return
		}
		c.deliver(int(ev._type), ev.elem, uint8(ev.port))
	}
}

func (c *Context) deliver(typ int, elem unsafe.Pointer, port uint8) {
	var e verbs.AsyncEvent
	switch typ {
	case C.IBV_EVENT_CQ_ERR:
		e.Type = verbs.EventCQErr
	case C.IBV_EVENT_QP_FATAL:
		e.Type = verbs.EventQPFatal
	case C.IBV_EVENT_QP_REQ_ERR:
		e.Type = verbs.EventQPReqErr
	case C.IBV_EVENT_QP_ACCESS_ERR:
		e.Type = verbs.EventQPAccessErr
	case C.IBV_EVENT_COMM_EST:
		e.Type = verbs.EventCommEst
	case C.IBV_EVENT_SQ_DRAINED:
		e.Type = verbs.EventSQDrained
	case C.IBV_EVENT_QP_LAST_WQE_REACHED:
		e.Type = verbs.EventQPLastWQEReached
	case C.IBV_EVENT_SRQ_LIMIT_REACHED:
		e.Type = verbs.EventSRQLimitReached
	case C.IBV_EVENT_PORT_ACTIVE:
		e.Type = verbs.EventPortActive
	case C.IBV_EVENT_PORT_ERR:
		e.Type = verbs.EventPortErr
	case C.IBV_EVENT_DEVICE_FATAL:
		e.Type = verbs.EventDeviceFatal
	default:
		return // path migration, LID/P_Key/SM/GID changes: no verbs event yet
	}
	e.Port = port
	if elem != nil {
		c.mu.Lock()
		o := c.objs[elem]
		c.mu.Unlock()
		switch o := o.(type) {
		case *QP:
			e.QP = o
			switch e.Type {
			case verbs.EventQPFatal, verbs.EventQPReqErr, verbs.EventQPAccessErr:
				o.state.Store(uint32(verbs.QPStateErr))
			}
		case *CQ:
			e.CQ = o
			o.overrun.Store(true)
		case *SRQ:
			e.SRQ = o
			if e.Type == verbs.EventSRQLimitReached {
				o.limit.Store(0) // the kernel disarmed it
			}
		default:
			return // destroyed meanwhile
		}
	}
	c.events.Send(e)
}

// AsyncEvents returns the channel of asynchronous events
// (verbs.AsyncEventer). It is closed when the context is.
func (c *Context) AsyncEvents() <-chan verbs.AsyncEvent { return c.events.C() }

// Device returns the device the context was opened on.
func (c *Context) Device() verbs.Device { return c.dev }

func (c *Context) check(op string) error {
	if c.closed.Load() {
		return verbs.Errorf(op, verbs.ErrDestroyed, "the device %s was closed, which destroyed what was created on it; open it again (ibverbs.Open) for new objects", c.dev.name)
	}
	return nil
}

func (c *Context) add(p unsafe.Pointer, o object) {
	c.mu.Lock()
	c.objs[p] = o
	if qp, ok := o.(*QP); ok {
		c.qps[qp.num] = qp
	}
	c.mu.Unlock()
}

func (c *Context) forget(p unsafe.Pointer) {
	c.mu.Lock()
	if qp, ok := c.objs[p].(*QP); ok && c.qps[qp.num] == qp {
		delete(c.qps, qp.num)
	}
	delete(c.objs, p)
	c.mu.Unlock()
}

// qpErrored records that QP num is in the error state: a completion
// with an error status says the device moved it there.
func (c *Context) qpErrored(num uint32) {
	c.mu.Lock()
	qp := c.qps[num]
	c.mu.Unlock()
	if qp != nil {
		qp.state.Store(uint32(verbs.QPStateErr))
	}
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (c *Context) QueryDevice() (verbs.DeviceAttr, error) {
	if err := c.check("QueryDevice"); err != nil {
		return verbs.DeviceAttr{}, err
	}
	return c.attr, nil
}

func (c *Context) queryDevice() (verbs.DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if r := C.ibv_query_device(c.ctx, &a); r != 0 {
		return verbs.DeviceAttr{}, errnoCode("QueryDevice", int(r), "ibv_query_device")
	}
	return verbs.DeviceAttr{
		FWVer:                 C.GoString(&a.fw_ver[0]),
		NodeGUID:              beToHost64(uint64(a.node_guid)),
		SysImageGUID:          beToHost64(uint64(a.sys_image_guid)),
		MaxMRSize:             uint64(a.max_mr_size),
		PageSizeCap:           uint64(a.page_size_cap),
		VendorID:              uint32(a.vendor_id),
		VendorPartID:          uint32(a.vendor_part_id),
		HWVer:                 uint32(a.hw_ver),
		MaxQP:                 int(a.max_qp),
		MaxQPWR:               int(a.max_qp_wr),
		DeviceCapFlags:        uint32(a.device_cap_flags),
		MaxSGE:                int(a.max_sge),
		MaxSGERd:              int(a.max_sge_rd),
		MaxCQ:                 int(a.max_cq),
		MaxCQE:                int(a.max_cqe),
		MaxMR:                 int(a.max_mr),
		MaxPD:                 int(a.max_pd),
		MaxQPRdAtom:           int(a.max_qp_rd_atom),
		MaxEECRdAtom:          int(a.max_ee_rd_atom),
		MaxResRdAtom:          int(a.max_res_rd_atom),
		MaxQPInitRdAtom:       int(a.max_qp_init_rd_atom),
		MaxEEInitRdAtom:       int(a.max_ee_init_rd_atom),
		AtomicCap:             verbs.AtomicCap(a.atomic_cap),
		MaxEE:                 int(a.max_ee),
		MaxRDD:                int(a.max_rdd),
		MaxMW:                 int(a.max_mw),
		MaxRawIPv6QP:          int(a.max_raw_ipv6_qp),
		MaxRawEthyQP:          int(a.max_raw_ethy_qp),
		MaxMcastGrp:           int(a.max_mcast_grp),
		MaxMcastQPAttach:      int(a.max_mcast_qp_attach),
		MaxTotalMcastQPAttach: int(a.max_total_mcast_qp_attach),
		MaxAH:                 int(a.max_ah),
		MaxFMR:                int(a.max_fmr),
		MaxMapPerFMR:          int(a.max_map_per_fmr),
		MaxSRQ:                int(a.max_srq),
		MaxSRQWR:              int(a.max_srq_wr),
		MaxSRQSGE:             int(a.max_srq_sge),
		MaxPKeys:              uint16(a.max_pkeys),
		LocalCADelayAck:       uint8(a.local_ca_ack_delay),
		PhysPortCnt:           uint8(a.phys_port_cnt),
	}, nil
}

// QueryPort returns port's attributes (ibv_query_port).
func (c *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	if err := c.check("QueryPort"); err != nil {
		return verbs.PortAttr{}, err
	}
	var a C.struct_ibv_port_attr
	if r := C.sr_query_port(c.ctx, C.uint8_t(port), &a); r != 0 {
		return verbs.PortAttr{}, c.portErr("QueryPort", port, int(r), "ibv_query_port")
	}
	pa := verbs.PortAttr{
		State:         verbs.PortState(a.state),
		MaxMTU:        verbs.MTU(a.max_mtu),
		ActiveMTU:     verbs.MTU(a.active_mtu),
		GIDTblLen:     int(a.gid_tbl_len),
		PortCapFlags:  uint32(a.port_cap_flags),
		MaxMsgSz:      uint32(a.max_msg_sz),
		BadPKeyCntr:   uint32(a.bad_pkey_cntr),
		QKeyViolCntr:  uint32(a.qkey_viol_cntr),
		PKeyTblLen:    uint16(a.pkey_tbl_len),
		LID:           uint16(a.lid),
		SMLID:         uint16(a.sm_lid),
		LMC:           uint8(a.lmc),
		MaxVLNum:      uint8(a.max_vl_num),
		SMSL:          uint8(a.sm_sl),
		SubnetTimeout: uint8(a.subnet_timeout),
		InitTypeReply: uint8(a.init_type_reply),
		ActiveWidth:   uint8(a.active_width),
		ActiveSpeed:   uint8(a.active_speed),
		PhysState:     uint8(a.phys_state),
	}
	switch a.link_layer {
	case C.IBV_LINK_LAYER_INFINIBAND:
		pa.LinkLayer = verbs.LinkLayerInfiniBand
	case C.IBV_LINK_LAYER_ETHERNET:
		pa.LinkLayer = verbs.LinkLayerEthernet
	}
	return pa, nil
}

func (c *Context) portErr(op string, port uint8, code int, what string) error {
	if port == 0 || port > c.attr.PhysPortCnt {
		return verbs.Errorf(op, verbs.ErrNotFound, "port %d: %s has ports 1..%d", port, c.dev.name, c.attr.PhysPortCnt)
	}
	return errnoCode(op, code, what)
}

// QueryGID returns entry index of port's GID table (ibv_query_gid).
func (c *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	if err := c.check("QueryGID"); err != nil {
		return verbs.GID{}, err
	}
	if index < 0 {
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "GID index %d", index)
	}
	var g C.union_ibv_gid
	if r, err := C.ibv_query_gid(c.ctx, C.uint8_t(port), C.int(index), &g); r != 0 {
		if port == 0 || port > c.attr.PhysPortCnt {
			return verbs.GID{}, c.portErr("QueryGID", port, 0, "")
		}
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "GID index %d of port %d: %v", index, port, err)
	}
	return verbs.GID(*(*[16]byte)(unsafe.Pointer(&g))), nil
}

// QueryGIDEntry returns entry index of port's GID table with its type
// and network interface (ibv_query_gid_ex). An empty entry fails with
// verbs.ErrNotFound.
func (c *Context) QueryGIDEntry(port uint8, index int) (GIDEntry, error) {
	if err := c.check("QueryGIDEntry"); err != nil {
		return GIDEntry{}, err
	}
	var e C.struct_ibv_gid_entry
	if r := C.sr_query_gid_ex(c.ctx, C.uint32_t(port), C.uint32_t(index), &e); r != 0 {
		if syscall.Errno(r) == syscall.ENODATA || syscall.Errno(-r) == syscall.ENODATA {
			return GIDEntry{}, verbs.Errorf("QueryGIDEntry", verbs.ErrNotFound, "GID index %d of port %d is empty", index, port)
		}
		if port == 0 || port > c.attr.PhysPortCnt {
			return GIDEntry{}, c.portErr("QueryGIDEntry", port, 0, "")
		}
		code := int(r)
		if code < 0 {
			code = -code
		}
		return GIDEntry{}, errnoCode("QueryGIDEntry", code, "ibv_query_gid_ex")
	}
	return GIDEntry{
		GID:     verbs.GID(*(*[16]byte)(unsafe.Pointer(&e.gid))),
		Index:   int(e.gid_index),
		Port:    uint8(e.port_num),
		Type:    GIDType(e.gid_type),
		IfIndex: int(e.ndev_ifindex),
	}, nil
}

// Close destroys what the application left of the objects created on
// the context, stops the event goroutine and closes the device.
func (c *Context) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed.Load() {
		return nil
	}
	c.RunCloseHooks()
	c.closed.Store(true)
	c.mu.Lock()
	left := make([]object, 0, len(c.objs))
	for _, o := range c.objs {
		left = append(left, o)
	}
	c.mu.Unlock()
	for order := 0; order < orderCount; order++ {
		for _, o := range left {
			if o.order() == order {
				o.forceDestroy()
			}
		}
	}
	c.asyncFile.Close()
	<-c.asyncDone
	c.events.Close()
	if c.owned {
		if r := C.ibv_close_device(c.ctx); r != 0 {
			return errnoCode("Close", int(r), "ibv_close_device")
		}
	}
	return nil
}

// The order Close destroys what was left in.
const (
	orderQP = iota
	orderSRQ
	orderAH
	orderMW
	orderMR
	orderCQ
	orderPD
	orderCount
)
