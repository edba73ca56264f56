//go:build cgo && clib

package main

/*
#include "ibverbs.h"
*/
import "C"

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/internal/handle"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// devEntry is one device ibv_get_device_list shows.
type devEntry struct {
	name string
	guid uint64
}

var (
	devMu   sync.Mutex
	devs    []devEntry
	opener  *device.Opener
	openErr error
)

// listDevices builds the device list once per process, with the tools'
// rules (internal/tools/device): SOFTRDMA_ADDR names the one RoCEv2
// device; without it, the softrdma device of every network interface,
// loopback last, as rdma-core lists real devices before rxe on lo. The
// shared-memory device shm0 comes last.
func listDevices() ([]devEntry, error) {
	devMu.Lock()
	defer devMu.Unlock()
	if devs != nil || openErr != nil {
		return devs, openErr
	}
	opener, openErr = device.NewOpener(context.Background(), os.Stderr)
	if openErr != nil {
		return nil, openErr
	}
	opener.ProcessAddrs = true
	// A C program may wait for a packet without polling (perftest's
	// WRITE latency test spins on the target memory between CQ polls,
	// where the Go tools call Progress): the receive loop, stepped aside
	// for its polls, must come back soon when they stop.
	opener.StepAsideCheck = stepAsideCheck
	logErrors = opener.Env.Log
	all, err := verbs.Devices()
	if err != nil {
		openErr = err
		return nil, err
	}
	var roce, lo, shm []devEntry
	if a := opener.Env.Addr; a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			openErr = err
			return nil, err
		}
		cfg := device.Config(soft.Config{}, addr)
		name := cfg.Name
		if name == "" {
			if netdev, err := soft.InterfaceOf(addr); err == nil {
				name = soft.DeviceName(netdev, addr)
			} else {
				name = "softrdma_" + strings.NewReplacer(".", "_", ":", "_").Replace(addr.String())
			}
		}
		e := devEntry{name: name}
		for _, d := range all {
			if d.Name() == name {
				e.guid = d.GUID()
			}
		}
		roce = append(roce, e)
	}
	for _, d := range all {
		e := devEntry{name: d.Name(), guid: d.GUID()}
		switch _, isSoft := soft.DeviceAddr(d); {
		case device.IsShmName(d.Name()):
			shm = append(shm, e)
		case !isSoft || opener.Env.Addr != "":
		case d.Name() == "softrdma_lo":
			lo = append(lo, e)
		default:
			roce = append(roce, e)
		}
	}
	devs = append(append(append([]devEntry{}, roce...), lo...), shm...)
	return devs, nil
}

//export srdgo_dev_count
func srdgo_dev_count() (ret C.int) {
	defer guardNeg("ibv_get_device_list", &ret)
	ds, err := listDevices()
	if err != nil {
		return -errnoOf("ibv_get_device_list", err)
	}
	return C.int(len(ds))
}

//export srdgo_dev_info
func srdgo_dev_info(i C.int, name *C.char, n C.int, guid *C.uint64_t) {
	defer func() { recover() }()
	devMu.Lock()
	e := devs[i]
	devMu.Unlock()
	b := unsafe.Slice((*byte)(unsafe.Pointer(name)), int(n))
	copy(b[:len(b)-1], e.name)
	*guid = C.uint64_t(e.guid)
}

// ctxObj is an open device: the verbs.Context and the C pointers of its
// objects, which asynchronous events and completion events name.
type ctxObj struct {
	name   string
	ctx    verbs.Context
	asyncW int // write end of the async_fd pipe

	mu      sync.Mutex
	cptr    map[any]unsafe.Pointer   // verbs QP/CQ/SRQ → its C struct
	handles map[handle.Handle]func() // every object's handle → its release
	done    chan struct{}
	closed  bool
	// asyncDone is closed when forwardAsync has returned: srdgo_close
	// waits for it, so that the C side closes the pipe's write end only
	// after the last write to it (else a record could land in whatever
	// file reuses the number). Nil without forwardAsync.
	asyncDone chan struct{}
}

//export srdgo_open
func srdgo_open(i C.int, asyncW C.int, h *C.uintptr_t) (ret C.int) {
	defer guard("ibv_open_device", &ret)
	ds, err := listDevices()
	if err != nil {
		return errnoOf("ibv_open_device", err)
	}
	if int(i) < 0 || int(i) >= len(ds) {
		return C.ENODEV
	}
	observeStart(&opener.Env)
	ctx, err := openShared(ds[i].name)
	if err != nil {
		return errnoOf("ibv_open_device", err)
	}
	observeOpened()
	c := &ctxObj{
		name:    ds[i].name,
		ctx:     ctx,
		asyncW:  int(asyncW),
		cptr:    map[any]unsafe.Pointer{},
		handles: map[handle.Handle]func(){},
		done:    make(chan struct{}),
	}
	if ae, ok := ctx.(verbs.AsyncEventer); ok {
		// A program that never reads its events must not block the
		// writer for ever (and srdgo_close with it): past the pipe's
		// 4096 records, events are dropped.
		syscall.SetNonblock(int(asyncW), true)
		c.asyncDone = make(chan struct{})
		go c.forwardAsync(ae.AsyncEvents())
	}
	*h = C.uintptr_t(handle.New(c))
	return 0
}

// forwardAsync writes each asynchronous event into the async_fd pipe as
// the record ibv_get_async_event reads: event type, port, element.
func (c *ctxObj) forwardAsync(ch <-chan verbs.AsyncEvent) {
	defer close(c.asyncDone)
	for {
		var ev verbs.AsyncEvent
		var ok bool
		select {
		case ev, ok = <-ch:
			if !ok {
				return
			}
		case <-c.done:
			return
		}
		var rec [16]byte
		typ, elem := c.asyncRecord(ev)
		if typ < 0 {
			continue
		}
		*(*uint32)(unsafe.Pointer(&rec[0])) = uint32(typ)
		*(*uint32)(unsafe.Pointer(&rec[4])) = uint32(ev.Port)
		*(*uint64)(unsafe.Pointer(&rec[8])) = uint64(uintptr(elem))
		writeAll(c.asyncW, rec[:])
	}
}

func (c *ctxObj) asyncRecord(ev verbs.AsyncEvent) (int, unsafe.Pointer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var elem unsafe.Pointer
	switch {
	case ev.QP != nil:
		elem = c.cptr[ev.QP]
	case ev.SRQ != nil:
		elem = c.cptr[ev.SRQ]
	case ev.CQ != nil:
		elem = c.cptr[ev.CQ]
	}
	types := map[verbs.AsyncEventType]int{
		verbs.EventQPFatal:          C.IBV_EVENT_QP_FATAL,
		verbs.EventQPReqErr:         C.IBV_EVENT_QP_REQ_ERR,
		verbs.EventQPAccessErr:      C.IBV_EVENT_QP_ACCESS_ERR,
		verbs.EventCommEst:          C.IBV_EVENT_COMM_EST,
		verbs.EventSQDrained:        C.IBV_EVENT_SQ_DRAINED,
		verbs.EventQPLastWQEReached: C.IBV_EVENT_QP_LAST_WQE_REACHED,
		verbs.EventSRQLimitReached:  C.IBV_EVENT_SRQ_LIMIT_REACHED,
		verbs.EventCQErr:            C.IBV_EVENT_CQ_ERR,
		verbs.EventPortActive:       C.IBV_EVENT_PORT_ACTIVE,
		verbs.EventPortErr:          C.IBV_EVENT_PORT_ERR,
		verbs.EventDeviceFatal:      C.IBV_EVENT_DEVICE_FATAL,
	}
	t, ok := types[ev.Type]
	if !ok || (elem == nil && ev.Port == 0 && ev.Type != verbs.EventDeviceFatal) {
		return -1, nil // an object the program already destroyed
	}
	return t, elem
}

// add registers a child object's handle so ibv_close_device releases it.
func (c *ctxObj) add(v any, cptr unsafe.Pointer, key any, release func()) handle.Handle {
	h := handle.New(v)
	c.mu.Lock()
	c.handles[h] = release
	if key != nil {
		c.cptr[key] = cptr
	}
	c.mu.Unlock()
	return h
}

// remove forgets a destroyed object's handle.
func (c *ctxObj) remove(h handle.Handle, key any) {
	c.mu.Lock()
	delete(c.handles, h)
	if key != nil {
		delete(c.cptr, key)
	}
	c.mu.Unlock()
	h.Delete()
}

//export srdgo_close
func srdgo_close(h C.uintptr_t) {
	defer func() { recover() }()
	c := handle.Handle(h).Value().(*ctxObj)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	hs := c.handles
	c.handles = map[handle.Handle]func(){}
	c.mu.Unlock()
	defer observeClosed()
	close(c.done)
	if c.asyncDone != nil {
		<-c.asyncDone
	}
	for ch, release := range hs {
		if release != nil {
			release()
		}
		ch.Delete()
	}
	closeShared(c.name)
	handle.Handle(h).Delete()
}

//export srdgo_ifindex
func srdgo_ifindex(h C.uintptr_t) (ret C.uint32_t) {
	defer func() {
		if recover() != nil {
			ret = 0
		}
	}()
	c := handle.Handle(h).Value().(*ctxObj)
	if d, ok := c.ctx.(*soft.Device); ok {
		if ifi, err := net.InterfaceByName(d.NetDev()); err == nil {
			return C.uint32_t(ifi.Index)
		}
	}
	return 0
}

func writeAll(fd int, b []byte) {
	for len(b) > 0 {
		n, err := sysWrite(fd, b)
		if err != nil {
			return
		}
		b = b[n:]
	}
}

// stepAsideCheck is the devices' soft.Config.StepAsideCheck: a packet that
// arrives while the program waits on memory waits at most two of these
// (the provider's default, 10 ms, made the 99th percentile of
// ib_write_lat milliseconds). It is the shortest interval: while the
// checks find no packet waiting for a program that spins on memory, the
// device doubles it up to 10 ms, since at 200 µs the 5000 wake-ups a
// second cost a program that only polls 6-7 % (provider/soft's asideLook).
const stepAsideCheck = 200 * time.Microsecond
