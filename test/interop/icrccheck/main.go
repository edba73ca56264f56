// Command icrccheck reads a pcap or pcapng capture and checks every RoCEv2
// packet in it (UDP to port 4791, IPv4 or IPv6): the headers parse and the
// ICRC recomputed from the real IP and UDP headers matches. It prints one
// summary line per sender and exits 1 if any packet is wrong; with
// -opcodes, also a line per sender with how many packets of each opcode
// it sent.
//
//	go run ./test/interop/icrccheck [-opcodes] capture.pcap
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/softrdma/softrdma/internal/pcapfile"
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

// check tallies, per sender, the RoCEv2 packets (UDP to port 4791) of a
// pcap or pcapng capture.
func check(name string) (map[string]*tally, error) {
	ds, err := pcapfile.RoCEv2(name)
	if err != nil {
		return nil, err
	}
	per := map[string]*tally{}
	for _, d := range ds {
		if d.DstPort != wire.UDPPort {
			continue
		}
		src := d.IP.Src.String()
		t := per[src]
		if t == nil {
			t = &tally{ops: map[wire.Opcode]int{}}
			per[src] = t
		}
		var p wire.Packet
		if err := wire.Parse(d.Payload, &p); err != nil {
			t.malformed++
			continue
		}
		t.ops[p.BTH.Opcode()]++
		if wire.ICRCFromHeaders(d.IP.Header, d.Header, d.Payload[:len(d.Payload)-wire.ICRCLen]) == p.ICRC {
			t.ok++
		} else {
			t.bad++
		}
	}
	return per, nil
}
