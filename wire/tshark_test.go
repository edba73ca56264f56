package wire

import (
	"bufio"
	"bytes"
	"fmt"
	"math/bits"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCapturesAgainstTshark cross-checks the parser against Wireshark's
// InfiniBand dissector, frame by frame. It is skipped where tshark is not
// installed (apt-get install tshark) or with -short.
func TestCapturesAgainstTshark(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	for _, path := range captureFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cmd := exec.Command(tshark, "-r", path, "-Y", "udp.port==4791", "-T", "fields", "-E", "separator=,",
				"-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
				"-e", "infiniband.bth.destqp", "-e", "infiniband.bth.a", "-e", "infiniband.invariant.crc")
			out, err := cmd.Output()
			if err != nil {
				t.Skipf("tshark: %v", err)
			}
			byFrame := map[int]capPacket{}
			for _, cp := range readCapture(t, path) {
				byFrame[cp.frame] = cp
			}
			lines := 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Split(sc.Text(), ",")
				if len(f) != 6 {
					t.Fatalf("tshark line %q", sc.Text())
				}
				lines++
				frame, _ := strconv.Atoi(f[0])
				cp, ok := byFrame[frame]
				if !ok {
					t.Errorf("frame %d: tshark decodes it, readCapture missed it", frame)
					continue
				}
				var p Packet
				if err := Parse(cp.pkt, &p); err != nil {
					t.Errorf("frame %d: %v", frame, err)
					continue
				}
				ack := "0"
				if p.BTH.AckReq() {
					ack = "1"
				}
				// tshark shows the ICRC bytes as a big-endian number.
				got := fmt.Sprintf("%d,%d,%d,0x%06x,%s,0x%08x", frame, p.BTH.Opcode(), p.BTH.PSN(), p.BTH.DestQP(), ack, bits.ReverseBytes32(p.ICRC))
				if got != sc.Text() {
					t.Errorf("frame %d: parsed %q, tshark %q", frame, got, sc.Text())
				}
			}
			if lines != len(byFrame) || lines == 0 {
				t.Errorf("tshark shows %d RoCEv2 frames, readCapture %d", lines, len(byFrame))
			}
		})
	}
}
