//go:build cgo && clib

package main

import (
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// A process may open one device several times: a program and the
// librdmacm.so.1 it links both call ibv_open_device (perftest -R opens
// its -d device, librdmacm opens every device). Each ibv_context is its
// own ctxObj (objects, async fd), but they share one softrdma device:
// a second device on the same address and port would need the port
// shared between processes' sockets, which is not available everywhere
// (a network namespace without /sys/fs/bpf). The device closes with its
// last context. Asynchronous events of the device reach one of the
// contexts that share it.
var (
	sharedMu   sync.Mutex
	sharedDevs = map[string]*sharedDev{}
)

type sharedDev struct {
	ctx  verbs.Context
	refs int
}

// openShared opens device name, or takes another reference to it when
// the process has it open already.
func openShared(name string) (verbs.Context, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if d := sharedDevs[name]; d != nil {
		d.refs++
		return d.ctx, nil
	}
	ctx, err := opener.Open(name)
	if err != nil {
		return nil, err
	}
	sharedDevs[name] = &sharedDev{ctx: ctx, refs: 1}
	return ctx, nil
}

// closeShared drops a reference taken by openShared and closes the
// device with the last one.
func closeShared(name string) {
	sharedMu.Lock()
	d := sharedDevs[name]
	if d == nil {
		sharedMu.Unlock()
		return
	}
	d.refs--
	last := d.refs == 0
	if last {
		delete(sharedDevs, name)
	}
	sharedMu.Unlock()
	if last {
		d.ctx.Close()
	}
}
