package devinfo

import (
	"bytes"
	"io"
	"testing"
)

func TestDevinfoArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want devinfoOptions
	}{
		{nil, devinfoOptions{}},
		{[]string{"-d", "softrdma_lo", "-i", "1", "-v"}, devinfoOptions{dev: "softrdma_lo", port: 1, verbose: true}},
		{[]string{"-dsoftrdma_lo", "-vi1"}, devinfoOptions{dev: "softrdma_lo", port: 1, verbose: true}},
		{[]string{"--ib-dev=x", "--ib-port", "0x1", "--verb"}, devinfoOptions{dev: "x", port: 1, verbose: true}},
		{[]string{"-v", "-l", "-d"}, devinfoOptions{list: true, verbose: true}}, // -l acts at once
		{[]string{"--list"}, devinfoOptions{list: true}},
		{[]string{"operand"}, devinfoOptions{}},
	} {
		o, err := parseDevinfoArgs(tc.args, io.Discard, io.Discard)
		if err != nil || *o != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.args, o, err, tc.want)
		}
	}
	for _, args := range [][]string{{"-x"}, {"-i", "0"}, {"-i", "-1"}, {"-d"}, {"--ib"}, {"--list=1"}, {"--nope"}} {
		var usage bytes.Buffer
		if _, err := parseDevinfoArgs(args, &usage, io.Discard); err == nil || !bytes.Contains(usage.Bytes(), []byte("  -l, --list             print only the IB devices names\n")) {
			t.Errorf("%q: err %v, usage %q", args, err, usage.String())
		}
	}
}
