package pingpong

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// The pingpongs parse as pingpong.c's getopt_long: long names and their
// unambiguous prefixes, attached values, options after the host, and
// rdma-core's options softrdma lacks refused by name.
func TestPingpongFlags(t *testing.T) {
	f, err := parsePPFlags("ibv_rc_pingpong", []string{"host", "--size=64", "--it", "5", "-g1", "-e", "--pcap", "x.pcapng", "--log"}, 4096, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.server != "host" || f.size != 64 || f.iters != 5 || f.gidx != 1 || !f.events || f.pcap != "x.pcapng" || !f.log || f.mtu != 1024 {
		t.Fatalf("parsed %+v", f)
	}
	if f, err := parsePPFlags("ibv_srq_pingpong", []string{"-q", "4"}, 4096, io.Discard); err != nil || f.numQP != 4 {
		t.Fatalf("srq -q 4: %+v, %v", f, err)
	}
	var usage strings.Builder
	if _, err := parsePPFlags("ibv_ud_pingpong", []string{"-h"}, 2048, &usage); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(usage.String(), "-s, --size=<size>") || strings.Contains(usage.String(), "--mtu") {
		t.Fatalf("-h: %v, usage:\n%s", err, usage.String())
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ibv_rc_pingpong", []string{"-o"}, "-o (--odp) is not supported"},
		{"ibv_rc_pingpong", []string{"--contiguous-mr"}, "--contiguous-mr is not supported"},
		{"ibv_ud_pingpong", []string{"--mtu", "1024"}, "unrecognized option '--mtu'"},
		{"ibv_rc_pingpong", []string{"-q", "4"}, "invalid option -- 'q'"},
		{"ibv_rc_pingpong", []string{"-s", "big"}, `invalid value "big" for -s`},
		{"ibv_rc_pingpong", []string{"-m", "1000"}, "invalid MTU 1000"},
		{"ibv_rc_pingpong", []string{"a", "b"}, "too many arguments"},
	} {
		if _, err := parsePPFlags(tc.name, tc.args, 4096, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want an error saying %q", tc.name, tc.args, err, tc.want)
		}
	}
}
