// Command icrccheck reads a pcap capture and checks every RoCEv2 packet in
// it (UDP port 4791, IPv4 or IPv6 over Ethernet): the headers parse and the
// ICRC recomputed from the real IP and UDP headers matches. It prints one
// summary line per sender and exits 1 if any packet is wrong; with
// -opcodes, also a line per sender with how many packets of each opcode
// it sent.
//
//	go run ./test/interop/icrccheck [-opcodes] capture.pcap
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"

	"github.com/softrdma/softrdma/wire"
)

type tally struct {
	ok, bad, malformed int
	ops                map[wire.Opcode]int
}

func main() {
	args := os.Args[1:]
	opcodes := len(args) == 2 && args[0] == "-opcodes"
	if opcodes {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: icrccheck [-opcodes] FILE.pcap")
		os.Exit(2)
	}
	per, err := check(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "icrccheck:", err)
		os.Exit(2)
	}
	srcs := make([]string, 0, len(per))
	for s := range per {
		srcs = append(srcs, s)
	}
	sort.Strings(srcs)
	failed := false
	total := 0
	for _, s := range srcs {
		t := per[s]
		total += t.ok + t.bad + t.malformed
		fmt.Printf("%s: %d RoCEv2 packets, %d ICRC ok, %d ICRC bad, %d malformed\n", s, t.ok+t.bad+t.malformed, t.ok, t.bad, t.malformed)
		failed = failed || t.bad > 0 || t.malformed > 0
		if opcodes {
			ops := make([]wire.Opcode, 0, len(t.ops))
			for op := range t.ops {
				ops = append(ops, op)
			}
			sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
			fmt.Printf("%s opcodes:", s)
			for _, op := range ops {
				fmt.Printf(" %v=%d", op, t.ops[op])
			}
			fmt.Println()
		}
	}
	if total == 0 {
		fmt.Println("no RoCEv2 packets in the capture")
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// check reads a classic pcap file (Ethernet link type).
func check(name string) (map[string]*tally, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var gh [24]byte
	if _, err := io.ReadFull(f, gh[:]); err != nil {
		return nil, fmt.Errorf("%s: not a pcap file: %w", name, err)
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(gh[:]) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("%s: not a classic pcap file", name)
	}
	if lt := bo.Uint32(gh[20:]); lt != 1 {
		return nil, fmt.Errorf("%s: link type %d, want Ethernet (1)", name, lt)
	}
	per := map[string]*tally{}
	var rh [16]byte
	buf := make([]byte, 1<<18)
	for {
		if _, err := io.ReadFull(f, rh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return per, nil
			}
			return nil, err
		}
		n := int(bo.Uint32(rh[8:]))
		if n > len(buf) {
			return nil, fmt.Errorf("record of %d bytes", n)
		}
		if _, err := io.ReadFull(f, buf[:n]); err != nil {
			return nil, err
		}
		frame := buf[:n]
		if len(frame) < 14 {
			continue
		}
		eth := binary.BigEndian.Uint16(frame[12:])
		l3 := frame[14:]
		var ipHdr, rest []byte
		var src netip.Addr
		switch {
		case eth == 0x0800 && len(l3) >= 20 && l3[9] == 17:
			ihl := int(l3[0]&0xF) * 4
			if len(l3) < ihl+8 {
				continue
			}
			ipHdr, rest = l3[:ihl], l3[ihl:]
			src = netip.AddrFrom4([4]byte(l3[12:16]))
		case eth == 0x86DD && len(l3) >= 48 && l3[6] == 17:
			ipHdr, rest = l3[:40], l3[40:]
			src = netip.AddrFrom16([16]byte(l3[8:24]))
		default:
			continue
		}
		if binary.BigEndian.Uint16(rest[2:]) != 4791 {
			continue
		}
		udpLen := int(binary.BigEndian.Uint16(rest[4:]))
		if udpLen > len(rest) || udpLen < 8 {
			continue // truncated capture
		}
		t := per[src.String()]
		if t == nil {
			t = &tally{ops: map[wire.Opcode]int{}}
			per[src.String()] = t
		}
		pkt := rest[8:udpLen]
		var p wire.Packet
		if err := wire.Parse(pkt, &p); err != nil {
			t.malformed++
			continue
		}
		t.ops[p.BTH.Opcode()]++
		if wire.ICRCFromHeaders(ipHdr, rest[:8], pkt[:len(pkt)-wire.ICRCLen]) == p.ICRC {
			t.ok++
		} else {
			t.bad++
		}
	}
}
