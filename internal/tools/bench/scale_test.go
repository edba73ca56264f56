package bench

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/internal/tools/devicetest"
	"github.com/softrdma/softrdma/verbs"
)

// With counters, each QP count's line is followed by what each device
// counted during that count alone: the second count's figures are not
// the sum of both.
func TestScaleCounters(t *testing.T) {
	da, db, _, _, _ := devicetest.Pair(t)
	var out strings.Builder
	if _, err := runScale(&out, da, db, []int{2, 2}, scaleOpts{size: 4096, msgs: 8, mtu: verbs.MTU1024, counters: true}); err != nil {
		t.Fatal(err)
	}
	sent := regexp.MustCompile(`(?m)^   device a: .*\bsent_pkts=(\d+)`).FindAllStringSubmatch(out.String(), -1)
	rcvd := regexp.MustCompile(`(?m)^   device b: .*\brcvd_pkts=(\d+)`).FindAllStringSubmatch(out.String(), -1)
	if len(sent) != 2 || len(rcvd) != 2 {
		t.Fatalf("want a device a and a device b line per QP count:\n%s", out.String())
	}
	// 8 WRITEs of 4 packets and the verification's 2: 34 for each count
	// (a retransmission on a loaded host adds a few), where a running
	// total would reach 68 at the second.
	for _, m := range sent {
		if n, _ := strconv.Atoi(m[1]); n < 34 || n >= 60 {
			t.Fatalf("sent_pkts %d per count, want 34 (plus any retransmissions):\n%s", n, out.String())
		}
	}
}
