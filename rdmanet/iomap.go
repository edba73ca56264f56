package rdmanet

import (
	"errors"
	"fmt"
	"os"

	"github.com/softrdma/softrdma/verbs"
)

// Mapping is a buffer this side mapped for the peer's direct writes
// (riomap with PROT_WRITE): the peer's IOWrite (riowrite) at offsets
// Offset..Offset+len(Bytes()) lands in it with no message and no
// completion here. Watch its bytes to learn that data arrived, as
// riostream polls the last byte of its buffer.
type Mapping struct {
	c      *Conn
	mr     verbs.MR
	offset uint64
	index  int
}

// Bytes returns the mapped memory (valid until Unmap).
func (m *Mapping) Bytes() []byte { return m.mr.Bytes() }

// Offset is where the mapping starts in the peer's IOWrite offsets.
func (m *Mapping) Offset() int64 { return int64(m.offset) }

// Progress lets a goroutine that polls the mapping's memory drive a
// software provider, as verbs.Progress does.
func (m *Mapping) Progress() { verbs.Progress(m.c.pd.Context()) }

// Unmap releases the mapping (riounmap); the peer is not told, so stop
// its writes first.
func (m *Mapping) Unmap() error {
	c := m.c
	c.mu.Lock()
	found := false
	for i, o := range c.mappings {
		if o == m {
			c.mappings = append(c.mappings[:i], c.mappings[i+1:]...)
			found = true
			break
		}
	}
	if found && m.index < len(c.remoteMaps) {
		c.remoteMaps[m.index] = false
	}
	c.mu.Unlock()
	if !found {
		return nil // Close released it
	}
	return m.mr.Dereg()
}

// IOMap maps length bytes for the peer's IOWrite at offset (riomap with
// PROT_WRITE): it registers zeroed memory and writes its address and key
// into a free entry of the peer's iomap (RS_OP_IOMAP_SGL, which uses one
// credit). It fails if the peer offered no free iomap entry
// (RDMA_IOMAPSIZE).
func (c *Conn) IOMap(length int, offset int64) (*Mapping, error) {
	return c.iomap(nil, length, offset)
}

// IOMapBuffer is IOMap over memory the caller owns (riomap of a program's
// buffer): buf is registered as it is, not copied, so the peer's IOWrite
// lands in it. buf must stay valid and must not move until Unmap (memory
// outside the Go heap, or pinned).
func (c *Conn) IOMapBuffer(buf []byte, offset int64) (*Mapping, error) {
	if len(buf) == 0 {
		return nil, c.opError("iomap", errors.New("rdmanet: IOMapBuffer of an empty buffer"))
	}
	return c.iomap(buf, len(buf), offset)
}

func (c *Conn) iomap(buf []byte, length int, offset int64) (*Mapping, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	index := -1
	for i, used := range c.remoteMaps {
		if !used {
			index = i
			break
		}
	}
	if index < 0 {
		c.mu.Unlock()
		return nil, c.opError("iomap", errors.New("rdmanet: the peer offers no free iomap entry (RDMA_IOMAPSIZE)"))
	}
	c.remoteMaps[index] = true
	c.mu.Unlock()
	var mr verbs.MR
	var err error
	if buf != nil {
		mr, err = c.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	} else {
		mr, err = c.pd.AllocMR(length, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}
	if err != nil {
		c.mu.Lock()
		c.remoteMaps[index] = false
		c.mu.Unlock()
		return nil, err
	}
	m := &Mapping{c: c, mr: mr, offset: uint64(offset), index: index}
	c.mu.Lock()
	c.mappings = append(c.mappings, m)
	c.mu.Unlock()
	var desc [iomapLen]byte
	iomap{Offset: m.offset, SGE: sge{Addr: mr.Addr(), Key: mr.RKey(), Length: uint32(length)}}.encode(desc[:], c.peerOrder)
	err = c.send(desc[:], func(nsge int) {
		// rs_write_iomap
		c.sseqNo++
		c.sqeAvail--
		c.sbufAvail -= iomapLen
		c.postLocked(msgSet(opIOMapSGL, uint32(index)), nsge, c.remoteIOMap.Addr+uint64(index)*iomapLen, c.remoteIOMap.Key, verbs.SendInline)
	}, true)
	if err != nil {
		m.Unmap()
		return nil, err
	}
	return m, nil
}

// IOWrite writes p at offset into the buffer the peer mapped there
// (riowrite): a plain RDMA WRITE, no message, no credit. It returns how
// much was written; it stops short at the end of the peer's mapping.
func (c *Conn) IOWrite(p []byte, offset int64) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, olen := 0, uint32(olapStartSize)
	for n < len(p) {
		c.mu.Lock()
		off := uint64(offset) + uint64(n)
		var m *iomap
		for i := range c.iomaps {
			e := &c.iomaps[i]
			if e.SGE.Length != 0 && off >= e.Offset && off < e.Offset+uint64(e.SGE.Length) {
				m = e
				break
			}
		}
		c.mu.Unlock()
		if m == nil {
			if n > 0 {
				return n, nil
			}
			return 0, c.opError("iowrite", fmt.Errorf("rdmanet: the peer mapped nothing at offset %d", off))
		}
		xfer := min(uint32(len(p)-n), olen, uint32(m.Offset+uint64(m.SGE.Length)-off))
		if olen < maxTransfer {
			olen <<= 1
		}
		addr, key := m.SGE.Addr+off-m.Offset, m.SGE.Key
		err := c.send(p[n:n+int(xfer)], func(nsge int) {
			// rs_write_direct
			c.sqeAvail--
			c.sbufAvail -= xfer
			c.swr = verbs.SendWR{WRID: uint64(msgSet(opWrite, xfer)), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				RemoteAddr: addr, RKey: key, SGList: c.ssge[:nsge]}
			if xfer <= c.inline {
				c.swr.SendFlags |= verbs.SendInline
			}
			if err := c.qp.PostSend(&c.swr); err != nil {
				c.failLocked(fmt.Errorf("rdmanet: posting a write: %w", err))
				return
			}
			c.sending++
		}, false)
		if err != nil {
			return n, err
		}
		n += int(xfer)
	}
	return n, nil
}

// send waits until a message may go (credits too if credit), stages b in
// the send buffer and calls post with mu held. Precondition: wmu held.
func (c *Conn) send(b []byte, post func(nsge int), credit bool) error {
	for {
		dl := c.wdl.wait()
		if isClosed(dl) {
			return c.opError("write", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.mu.Unlock()
			return c.opError("write", err)
		}
		ok := c.sqeAvail > 0 && c.sbufAvail >= max(sndLowat, uint32(len(b)))
		if credit {
			ok = ok && c.sseqNo != c.sseqComp
		}
		if ok {
			post(c.stageLocked(b))
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		if c.spin() {
			continue
		}
		select {
		case <-c.writeWake:
		case <-c.closedCh:
		case <-dl:
		}
	}
}

// stageLocked copies b into the send buffer at its head and sets c.ssge;
// it returns how many SGEs it used (two when b wraps).
func (c *Conn) stageLocked(b []byte) int {
	xfer := uint32(len(b))
	nsge := 1
	if end := c.sendSize - c.sbufHead; xfer <= end {
		copy(c.sbuf.Bytes()[c.sbufHead:], b)
		c.ssge[0] = c.sbuf.SGE(int(c.sbufHead), int(xfer))
		c.sbufHead += xfer
	} else {
		copy(c.sbuf.Bytes()[c.sbufHead:c.sendSize], b)
		copy(c.sbuf.Bytes(), b[end:])
		c.ssge[0] = c.sbuf.SGE(int(c.sbufHead), int(end))
		c.ssge[1] = c.sbuf.SGE(0, int(xfer-end))
		c.sbufHead = xfer - end
		nsge = 2
	}
	if c.sbufHead == c.sendSize {
		c.sbufHead = 0
	}
	return nsge
}
