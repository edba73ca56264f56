//go:build ibverbs && cgo && linux

package ibverbs

/*
#include "sr.h"
#include <stdint.h>
*/
import "C"

import (
	"os"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

// Completion channels. The CQs created with the same verbs.CompChannel
// share one ibv_comp_channel, and those created without one share the
// context's own: one descriptor in the netpoller and one goroutine per
// channel (chanpoll.go), not per CQ. A channel lives while a CQ uses it.

// compChannel is one ibv_comp_channel of the context.
type compChannel struct {
	key     *verbs.CompChannel // nil: the channel of the CQs created without one
	channel *C.struct_ibv_comp_channel
	poller  *chanPoller
	users   int // CQs on the channel; guarded by Context.chMu
}

// compSource reads a libibverbs completion channel.
type compSource struct{ channel *C.struct_ibv_comp_channel }

func (s compSource) get(_ uintptr, handles []uintptr) (int, bool) {
	var drained C.int
	n := C.sr_get_cq_events(s.channel, (*C.uintptr_t)(unsafe.Pointer(&handles[0])), C.int(len(handles)), &drained)
	return int(n), drained != 0
}

func (s compSource) ack(h uintptr, n int) {
	C.sr_ack_cq_events(C.uintptr_t(h), C.uint(n))
}

// acquireChannel returns the channel for CQs created with key, creating
// it for the first; each call is paired with releaseChannel.
func (c *Context) acquireChannel(key *verbs.CompChannel) (*compChannel, error) {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	if ch := c.chans[key]; ch != nil {
		ch.users++
		return ch, nil
	}
	channel, err := C.ibv_create_comp_channel(c.ctx)
	if channel == nil {
		return nil, errnoErr("CreateCQ", err, "ibv_create_comp_channel")
	}
	fd := C.sr_nonblock_dup(channel.fd)
	if fd < 0 {
		C.ibv_destroy_comp_channel(channel)
		return nil, verbs.Errorf("CreateCQ", verbs.ErrInvalidArgument, "cannot make the completion channel non-blocking")
	}
	file := os.NewFile(uintptr(fd), "ibv-comp-"+c.dev.name)
	p, err := startPoller(compSource{channel}, file)
	if err != nil {
		file.Close()
		C.ibv_destroy_comp_channel(channel)
		return nil, verbs.Errorf("CreateCQ", verbs.ErrInvalidArgument, "completion channel: %v", err)
	}
	ch := &compChannel{key: key, channel: channel, poller: p, users: 1}
	if c.chans == nil {
		c.chans = map[*verbs.CompChannel]*compChannel{}
	}
	c.chans[key] = ch
	return ch, nil
}

// releaseChannel drops a CQ's use of ch (after ibv_destroy_cq, or a
// failed ibv_create_cq); the last one stops its goroutine and destroys
// it.
func (c *Context) releaseChannel(ch *compChannel) {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	if ch.users--; ch.users > 0 {
		return
	}
	if c.chans[ch.key] == ch {
		delete(c.chans, ch.key)
	}
	ch.poller.stop()
	C.ibv_destroy_comp_channel(ch.channel)
}

// channels reports how many completion channels the context has open
// (for tests).
func (c *Context) channels() int {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	return len(c.chans)
}
