package netsim

import (
	"encoding/binary"
	"net/netip"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// icrcLen is the length of the RoCEv2 invariant CRC that ends every packet.
const icrcLen = wire.ICRCLen

// flowPort is the UDP source port of a flow, as rxe derives it: the top two
// bits set (the dynamic port range) and the low 14 bits of the flow.
func flowPort(flow uint32) uint16 { return 0xC000 | uint16(flow&0x3FFF) }

// ipInfo describes the IP and UDP headers a packet from src:sport to
// dst:4791 travels in on the simulated network: the headers of an
// unconnected Linux UDP socket with Don't-Fragment set (IPv4 ID 0, DF), as
// transport/udp sends. The ICRC itself is wire's; netsim only says what
// the headers would be.
func ipInfo(src, dst netip.Addr, sport uint16) wire.IPInfo {
	return wire.IPInfo{Src: src, Dst: dst, SrcPort: sport, DstPort: transport.Port, DF: true}
}

// putICRC writes the ICRC of pkt into its last four bytes (wire.PutICRC).
// pkt must be at least icrcLen bytes long.
func putICRC(pkt []byte, src, dst netip.Addr, sport uint16) {
	ip := ipInfo(src, dst, sport)
	wire.PutICRC(pkt, &ip)
}

// checkICRC reports whether the last four bytes of pkt hold its ICRC. Unlike
// wire.CheckICRC it accepts a packet shorter than a BTH, since netsim
// carries whatever its users send.
func checkICRC(pkt []byte, src, dst netip.Addr, sport uint16) bool {
	if len(pkt) < icrcLen {
		return false
	}
	ip := ipInfo(src, dst, sport)
	end := len(pkt) - icrcLen
	return binary.LittleEndian.Uint32(pkt[end:]) == wire.ICRC(&ip, pkt[:end])
}
