package nvmeof

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
)

// Controller types (Identify Controller CNTRLTYPE, NVMe 1.4).
const (
	ctrlTypeIO        = 1
	ctrlTypeDiscovery = 2
)

// ControllerInfo is what Identify Controller reports (NVMe 1.4, figure 251;
// NVMe-oF 1.1, figure 27 for the fabrics fields), the fields a host acts on.
type ControllerInfo struct {
	VendorID        uint16
	Serial, Model   string
	Firmware        string
	CNTLID          uint16
	Version         uint32 // VER: major<<16 | minor<<8
	MDTS            uint8  // maximum data transfer: 2^MDTS minimum pages (4 KiB); 0 none
	MaxCmd          uint16 // MAXCMD: outstanding commands per queue
	NN              uint32 // number of namespaces (the highest NSID)
	KAS             uint16 // keep-alive granularity, 100 ms units
	SGLS            uint32
	SubNQN          string
	IOCCSZ          uint32 // I/O command capsule size in 16-byte units (64 bytes + in-capsule data)
	IORCSZ          uint32 // I/O response capsule size in 16-byte units
	ICDOFF          uint16
	ControllerType  uint8
	AERL            uint8  // concurrent async event requests, 0's based
	OAES            uint32 // optional async events: bit 8, namespace attribute notices
	ONCS            uint16 // optional NVM commands: bit 2 DSM, bit 3 Write Zeroes
	VWC             uint8  // bit 0: a volatile write cache (Flush does something)
	LPA             uint8  // log page attributes: bit 2 extended data
	SQES, CQES      uint8
	MaxTransferSize int // MDTS in bytes (0: no limit); set by parseControllerInfo
}

// The SGL support bits of Identify Controller's SGLS.
const (
	sglsSupported = 1 << 0
	sglsKeyed     = 1 << 2
	sglsOffset    = 1 << 20
)

func (c *ControllerInfo) encode(b []byte) {
	clear(b[:identifyDataBytes])
	binary.LittleEndian.PutUint16(b[0:], c.VendorID)
	binary.LittleEndian.PutUint16(b[2:], c.VendorID)
	putPadded(b[4:24], c.Serial)
	putPadded(b[24:64], c.Model)
	putPadded(b[64:72], c.Firmware)
	b[77] = c.MDTS
	binary.LittleEndian.PutUint16(b[78:], c.CNTLID)
	binary.LittleEndian.PutUint32(b[80:], c.Version)
	binary.LittleEndian.PutUint32(b[92:], c.OAES)
	b[111] = c.ControllerType
	b[259] = c.AERL
	b[261] = c.LPA
	binary.LittleEndian.PutUint16(b[320:], c.KAS)
	b[512], b[513] = c.SQES, c.CQES
	binary.LittleEndian.PutUint16(b[514:], c.MaxCmd)
	binary.LittleEndian.PutUint32(b[516:], c.NN)
	binary.LittleEndian.PutUint16(b[520:], c.ONCS)
	b[525] = c.VWC
	binary.LittleEndian.PutUint32(b[536:], c.SGLS)
	copy(b[768:1024], c.SubNQN)
	binary.LittleEndian.PutUint32(b[1792:], c.IOCCSZ)
	binary.LittleEndian.PutUint32(b[1796:], c.IORCSZ)
	binary.LittleEndian.PutUint16(b[1800:], c.ICDOFF)
	b[1803] = 1 // MSDBD: one SGL data block descriptor per command
}

// parseControllerInfo reads an Identify Controller data structure.
func parseControllerInfo(b []byte) (ControllerInfo, error) {
	if len(b) < identifyDataBytes {
		return ControllerInfo{}, fmt.Errorf("nvmeof: identify controller data of %d bytes, want %d", len(b), identifyDataBytes)
	}
	c := ControllerInfo{
		VendorID:       binary.LittleEndian.Uint16(b),
		Serial:         trimPadded(b[4:24]),
		Model:          trimPadded(b[24:64]),
		Firmware:       trimPadded(b[64:72]),
		MDTS:           b[77],
		CNTLID:         binary.LittleEndian.Uint16(b[78:]),
		Version:        binary.LittleEndian.Uint32(b[80:]),
		OAES:           binary.LittleEndian.Uint32(b[92:]),
		ControllerType: b[111],
		AERL:           b[259],
		LPA:            b[261],
		KAS:            binary.LittleEndian.Uint16(b[320:]),
		SQES:           b[512],
		CQES:           b[513],
		MaxCmd:         binary.LittleEndian.Uint16(b[514:]),
		NN:             binary.LittleEndian.Uint32(b[516:]),
		ONCS:           binary.LittleEndian.Uint16(b[520:]),
		VWC:            b[525],
		SGLS:           binary.LittleEndian.Uint32(b[536:]),
		SubNQN:         cString(b[768:1024]),
		IOCCSZ:         binary.LittleEndian.Uint32(b[1792:]),
		IORCSZ:         binary.LittleEndian.Uint32(b[1796:]),
		ICDOFF:         binary.LittleEndian.Uint16(b[1800:]),
	}
	if c.MDTS != 0 && c.MDTS < 20 {
		c.MaxTransferSize = 4096 << c.MDTS
	}
	return c, nil
}

func trimPadded(b []byte) string {
	s := cString(b)
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// NamespaceInfo is what Identify Namespace reports (NVMe 1.4, figure 245).
type NamespaceInfo struct {
	Blocks    uint64 // NSZE = NCAP = NUSE: the size in logical blocks
	BlockSize int    // the one LBA format's data size
	NGUID     [16]byte
}

func (n *NamespaceInfo) encode(b []byte) {
	clear(b[:identifyDataBytes])
	binary.LittleEndian.PutUint64(b[0:], n.Blocks)
	binary.LittleEndian.PutUint64(b[8:], n.Blocks)
	binary.LittleEndian.PutUint64(b[16:], n.Blocks)
	// NLBAF 0 (one format), FLBAS 0 (format 0, no metadata).
	copy(b[104:120], n.NGUID[:])
	b[130] = byte(bits.TrailingZeros(uint(n.BlockSize))) // LBAF0.LBADS
}

func parseNamespaceInfo(b []byte) (NamespaceInfo, error) {
	if len(b) < identifyDataBytes {
		return NamespaceInfo{}, fmt.Errorf("nvmeof: identify namespace data of %d bytes, want %d", len(b), identifyDataBytes)
	}
	format := b[26] & 0xf
	lbads := b[128+4*int(format)+2]
	if lbads < 9 || lbads > 16 {
		return NamespaceInfo{}, fmt.Errorf("nvmeof: namespace LBA format %d has a data size of 2^%d bytes", format, lbads)
	}
	n := NamespaceInfo{Blocks: binary.LittleEndian.Uint64(b), BlockSize: 1 << lbads}
	copy(n.NGUID[:], b[104:120])
	return n, nil
}

// Discovery log page (NVMe-oF 1.1, 5.3): a 1024-byte header, then one
// 1024-byte entry per subsystem port.
const (
	discoveryHeaderLen = 1024
	discoveryEntryLen  = 1024
)

// Transport and address values of a discovery log entry.
const (
	trTypeRDMA      = 1
	adrFamIPv4      = 1
	adrFamIPv6      = 2
	subTypeNVM      = 2
	subTypeCurrDisc = 3
	rdmaQPTypeRC    = 1
	rdmaPRTypeRoCE2 = 4 // RoCEv2
	rdmaCMSRDMACM   = 1
)

// DiscoveryEntry is one record of the discovery log page.
type DiscoveryEntry struct {
	SubNQN  string
	SubType uint8 // 2: an NVM subsystem; 3: this discovery subsystem
	PortID  uint16
	Addr    netip.AddrPort // TRADDR and TRSVCID
	TRType  uint8          // 1: RDMA
}

func (e *DiscoveryEntry) encode(b []byte) {
	clear(b[:discoveryEntryLen])
	b[0] = trTypeRDMA
	b[1] = adrFamIPv4
	if e.Addr.Addr().Is6() && !e.Addr.Addr().Is4In6() {
		b[1] = adrFamIPv6
	}
	b[2] = e.SubType
	b[3] = 0x02 // TREQ: secure channel not required... bits 1:0 = 10b
	binary.LittleEndian.PutUint16(b[4:], e.PortID)
	binary.LittleEndian.PutUint16(b[6:], 0xffff) // dynamic controller model
	binary.LittleEndian.PutUint16(b[8:], 32)     // ASQSZ
	putPadded(b[32:64], strconv.Itoa(int(e.Addr.Port())))
	copy(b[256:512], e.SubNQN)
	putPadded(b[512:768], e.Addr.Addr().Unmap().String())
	b[768], b[769], b[770] = rdmaQPTypeRC, rdmaPRTypeRoCE2, rdmaCMSRDMACM
}

// parseDiscoveryLog reads a discovery log page: its generation counter and
// entries.
func parseDiscoveryLog(b []byte) (gen uint64, entries []DiscoveryEntry, err error) {
	if len(b) < discoveryHeaderLen {
		return 0, nil, fmt.Errorf("nvmeof: discovery log of %d bytes, shorter than its header", len(b))
	}
	gen = binary.LittleEndian.Uint64(b)
	n := binary.LittleEndian.Uint64(b[8:])
	if n > uint64(len(b)-discoveryHeaderLen)/discoveryEntryLen {
		return 0, nil, fmt.Errorf("nvmeof: discovery log says %d records, %d bytes hold %d", n, len(b), (len(b)-discoveryHeaderLen)/discoveryEntryLen)
	}
	for i := range int(n) {
		r := b[discoveryHeaderLen+i*discoveryEntryLen:][:discoveryEntryLen]
		e := DiscoveryEntry{TRType: r[0], SubType: r[2], PortID: binary.LittleEndian.Uint16(r[4:]), SubNQN: cString(r[256:512])}
		ip, _ := netip.ParseAddr(trimPadded(r[512:768]))
		port, _ := strconv.Atoi(trimPadded(r[32:64]))
		if port >= 0 && port < 1<<16 {
			e.Addr = netip.AddrPortFrom(ip, uint16(port))
		}
		entries = append(entries, e)
	}
	return gen, entries, nil
}
