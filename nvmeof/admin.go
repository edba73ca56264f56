package nvmeof

import (
	"encoding/binary"
	"time"
)

// The controller's properties (NVMe-oF 1.1, 3.5.2). CAP: MQES (0's based),
// CQR (contiguous queues required), TO 7.5 s, CSS: the NVM command set,
// MPSMIN 4 KiB.
func (c *controller) cap() uint64 {
	return uint64(c.t.cfg.MaxQueueSize-1) | 1<<16 | 15<<24 | 1<<37
}

const (
	ccEnable    = 1 << 0
	ccShutdown  = 3 << 14
	cstsReady   = 1 << 0
	cstsShDone  = 2 << 2
	cstsShMask  = 3 << 2
	nvmeVersion = 0x10300
)

func (c *controller) propertyGet(size8 bool, off uint32) (Status, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case off == propCAP && size8:
		return StatusSuccess, c.cap()
	case off == propVS && !size8:
		return StatusSuccess, nvmeVersion
	case off == propCC && !size8:
		return StatusSuccess, uint64(c.cc)
	case off == propCSTS && !size8:
		return StatusSuccess, uint64(c.csts)
	}
	return StatusInvalidField | StatusDNR, 0
}

// propertySet writes CC, the only writable property: enabling makes the
// controller ready, a shutdown notification completes at once (nothing
// is cached that a shutdown would have to write).
func (c *controller) propertySet(off uint32, v uint64) Status {
	if off != propCC {
		return StatusInvalidField | StatusDNR
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := uint32(v)
	switch {
	case cc&ccShutdown != 0:
		c.csts = c.csts&^cstsShMask | cstsShDone
	case cc&ccEnable != 0 && c.cc&ccEnable == 0:
		// IOSQES and IOCQES must be 64 and 16 bytes (2^6, 2^4).
		if cc>>16&0xf != 6 || cc>>20&0xf != 4 {
			c.csts |= 1 << 1 // CFS: the host asked for what cannot be
			return StatusInvalidField | StatusDNR
		}
		c.csts = c.csts&^cstsShMask | cstsReady
	case cc&ccEnable == 0 && c.cc&ccEnable != 0:
		c.csts &^= cstsReady
	}
	c.cc = cc
	return StatusSuccess
}

// admin serves an admin command; out is the buffer for data to the host.
func (q *queue) admin(slot int, c Command, out []byte) (Status, uint64) {
	ctrl := q.ctrl
	switch c.Opcode() {
	case AdminIdentify:
		return ctrl.identify(c, out), 0
	case AdminGetLogPage:
		return ctrl.getLogPage(q, c, out), 0
	case AdminSetFeatures:
		return ctrl.setFeatures(c)
	case AdminGetFeatures:
		return ctrl.getFeatures(c)
	case AdminKeepAlive:
		return StatusSuccess, 0 // command() already reset the timer
	case AdminAsyncEvent:
		ctrl.mu.Lock()
		defer ctrl.mu.Unlock()
		if len(ctrl.aers) > 3 {
			return 0x105 | StatusDNR, 0 // asynchronous event request limit exceeded
		}
		ctrl.aers = append(ctrl.aers, aerSlot{q: q, cid: c.CID()})
		return statusNoResponse, 0
	case AdminAbort:
		return StatusSuccess, 1 // bit 0: the command was not aborted
	}
	return StatusInvalidOpcode | StatusDNR, 0
}

func (c *controller) identify(cmd Command, out []byte) Status {
	cns := uint8(cmd.CDW(10))
	buf := make([]byte, identifyDataBytes)
	switch cns {
	case cnsController:
		ci := c.info()
		ci.encode(buf)
	case cnsNamespace:
		if c.isDiscovery() {
			return StatusInvalidField | StatusDNR
		}
		ns := c.sub.namespace(cmd.NSID())
		if ns == nil {
			if cmd.NSID() == 0 || cmd.NSID() > c.sub.maxNSID() && cmd.NSID() != 0xffffffff {
				return StatusInvalidNamespace | StatusDNR
			}
			break // an inactive NSID: all zeros
		}
		info := NamespaceInfo{Blocks: uint64(ns.Store.Size()) / uint64(ns.BlockSize), BlockSize: ns.BlockSize, NGUID: nguid(c.sub.NQN, ns.ID)}
		info.encode(buf)
	case cnsActiveNSList:
		if c.isDiscovery() {
			return StatusInvalidField | StatusDNR
		}
		var ids []uint32
		for _, ns := range c.sub.Namespaces {
			if ns.ID > cmd.NSID() {
				ids = append(ids, ns.ID)
			}
		}
		sortUint32(ids)
		for i, id := range ids[:min(len(ids), 1024)] {
			binary.LittleEndian.PutUint32(buf[4*i:], id)
		}
	case cnsNSDescriptors:
		if c.isDiscovery() {
			return StatusInvalidField | StatusDNR
		}
		ns := c.sub.namespace(cmd.NSID())
		if ns == nil {
			return StatusInvalidNamespace | StatusDNR
		}
		g := nguid(c.sub.NQN, ns.ID)
		buf[0], buf[1] = 2, 16 // NGUID
		copy(buf[4:20], g[:])
		buf[20], buf[21] = 4, 1 // CSI: the NVM command set (0)
	case 0x06: // I/O command set specific controller data: no limits of its own
		if cmd.CDW(11)>>24 != 0 {
			return StatusInvalidField | StatusDNR
		}
	default:
		return StatusInvalidField | StatusDNR
	}
	copy(out, buf)
	return StatusSuccess
}

func sortUint32(s []uint32) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// getLogPage copies the part of a log page the command asks for (its
// offset in CDW12-13, its length in NUMD) into out.
func (c *controller) getLogPage(q *queue, cmd Command, out []byte) Status {
	lid := uint8(cmd.CDW(10))
	off := uint64(cmd.CDW(12)) | uint64(cmd.CDW(13))<<32
	var page []byte
	switch {
	case lid == LogDiscovery && c.isDiscovery():
		page = c.t.discoveryLog(c.hostNQN, q.local)
	case lid == LogError && !c.isDiscovery():
		page = make([]byte, 64)
	case lid == LogSMART && !c.isDiscovery():
		page = make([]byte, 512)
		page[3] = 100 // available spare, %
		page[4] = 10  // its threshold
	case lid == LogFirmware && !c.isDiscovery():
		page = make([]byte, 512)
		page[0] = 1 // slot 1 active
		copy(page[8:16], "softrdma")
	case lid == LogChangedNS && !c.isDiscovery():
		page = make([]byte, 4096)
	default:
		return StatusInvalidLogPage | StatusDNR
	}
	if off&3 != 0 || off > uint64(len(page)) {
		return StatusInvalidField | StatusDNR
	}
	n := copy(out, page[off:])
	clear(out[n:])
	return StatusSuccess
}

func (c *controller) setFeatures(cmd Command) (Status, uint64) {
	if cmd.CDW(10)>>31 != 0 {
		return StatusFeatureNotSaveable | StatusDNR, 0
	}
	v := cmd.CDW(11)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch uint8(cmd.CDW(10)) {
	case FeatNumQueues:
		if c.isDiscovery() {
			return StatusInvalidField | StatusDNR, 0
		}
		nsq, ncq := int(v&0xffff)+1, int(v>>16)+1
		if nsq == 0x10000 || ncq == 0x10000 {
			return StatusInvalidField | StatusDNR, 0
		}
		n := min(nsq, ncq, c.t.cfg.MaxIOQueues)
		c.ioQueues = n
		return StatusSuccess, uint64(n-1) | uint64(n-1)<<16
	case FeatAsyncEvent:
		c.aec = v
		return StatusSuccess, 0
	case FeatKeepAlive:
		c.kato = time.Duration(v) * time.Millisecond
		if c.kato > 0 {
			if c.kaTimer == nil {
				c.kaTimer = time.AfterFunc(c.kato, c.checkKeepAlive)
			} else {
				c.kaTimer.Reset(c.kato)
			}
		}
		return StatusSuccess, 0
	case featArbitration:
		return StatusSuccess, 0
	}
	return StatusInvalidField | StatusDNR, 0
}

func (c *controller) getFeatures(cmd Command) (Status, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch uint8(cmd.CDW(10)) {
	case FeatNumQueues:
		n := uint64(c.ioQueues - 1)
		return StatusSuccess, n | n<<16
	case FeatAsyncEvent:
		return StatusSuccess, uint64(c.aec)
	case FeatKeepAlive:
		return StatusSuccess, uint64(c.kato / time.Millisecond)
	case featArbitration:
		return StatusSuccess, 0
	}
	return StatusInvalidField | StatusDNR, 0
}

// io serves an NVM command set command on namespace NSID: data holds the
// host's data (Write, Dataset Management), out is the buffer for data to
// the host (Read).
func (q *queue) io(c Command, data, out []byte) Status {
	ns := q.ctrl.sub.namespace(c.NSID())
	if ns == nil {
		return StatusInvalidNamespace | StatusDNR
	}
	blocks := uint64(ns.Store.Size()) / uint64(ns.BlockSize)
	bs := int64(ns.BlockSize)
	inRange := func(slba, n uint64) bool { return slba < blocks && n <= blocks-slba }
	switch c.Opcode() {
	case IORead:
		n := uint64(c.NLB()) + 1
		if !inRange(c.SLBA(), n) {
			return StatusLBARange | StatusDNR
		}
		if _, err := ns.Store.ReadAt(out, int64(c.SLBA())*bs); err != nil {
			return StatusUnrecoveredRead
		}
	case IOWrite:
		n := uint64(c.NLB()) + 1
		if ns.ReadOnly {
			return 0x282 | StatusDNR // attempted write to a read-only range
		}
		if !inRange(c.SLBA(), n) {
			return StatusLBARange | StatusDNR
		}
		if _, err := ns.Store.WriteAt(data, int64(c.SLBA())*bs); err != nil {
			return StatusWriteFault
		}
	case IOFlush:
		if s, ok := ns.Store.(Syncer); ok {
			if err := s.Sync(); err != nil {
				return StatusWriteFault
			}
		}
	case IOWriteZeroes:
		n := uint64(c.NLB()) + 1
		if ns.ReadOnly {
			return 0x282 | StatusDNR
		}
		if !inRange(c.SLBA(), n) {
			return StatusLBARange | StatusDNR
		}
		if err := zeroRange(ns.Store, int64(c.SLBA())*bs, int64(n)*bs); err != nil {
			return StatusWriteFault
		}
	case IODSM:
		if c.CDW(11)&(1<<2) == 0 {
			return StatusSuccess // only deallocate does anything
		}
		if ns.ReadOnly {
			return 0x282 | StatusDNR
		}
		for r := 0; r+16 <= len(data); r += 16 {
			nlb, slba := uint64(binary.LittleEndian.Uint32(data[r+4:])), binary.LittleEndian.Uint64(data[r+8:])
			if nlb == 0 {
				continue
			}
			if !inRange(slba, nlb) {
				return StatusLBARange | StatusDNR
			}
			if d, ok := ns.Store.(Discarder); ok {
				if err := d.Discard(int64(slba)*bs, int64(nlb)*bs); err != nil {
					return StatusInternal
				}
			}
		}
	default:
		return StatusInvalidOpcode | StatusDNR
	}
	return StatusSuccess
}

func zeroRange(s Store, off, n int64) error {
	if z, ok := s.(Zeroer); ok {
		return z.WriteZeroes(off, n)
	}
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(zero)))
		if _, err := s.WriteAt(zero[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}
