package rdmacm

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// rstream and riostream, both roles in this process (each role opens its
// own device), data verified; -T s runs rstream over TCP.
func TestRstream(t *testing.T) {
	for i, tc := range []struct {
		cmd      string
		args     []string
		srv, cli string
	}{
		{"rstream", []string{"-S", "3000", "-C", "50", "-T", "v", "-B", "4096"}, "", ""},
		{"rstream", []string{"-S", "64", "-C", "1", "-I", "100", "-T", "v"}, "", ""},
		{"rstream", []string{"-S", "64", "-C", "1", "-I", "100", "-T", "blocking", "-T", "v"}, "", ""},
		{"rstream", []string{"-S", "3000", "-C", "20", "-T", "a", "-T", "b", "-T", "v", "-f", "gid"}, "::ffff:127.0.76.2", "::ffff:127.0.76.1"},
		{"rstream", []string{"-S", "1000", "-C", "10", "-T", "s", "-T", "v"}, "", ""},
		{"riostream", []string{"-S", "5000", "-C", "10", "-T", "v"}, "", ""},
	} {
		srv, cli := "127.0.76.2", "127.0.76.1"
		if tc.srv != "" {
			srv, cli = tc.srv, tc.cli
		}
		port := []string{"-p", "17471"}
		errc := make(chan error, 1)
		go func() { errc <- runTool(tc.cmd, append(append([]string{"-b", srv}, port...), tc.args...)) }()
		time.Sleep(300 * time.Millisecond)
		if err := runTool(tc.cmd, append(append([]string{"-b", cli, "-s", srv}, port...), tc.args...)); err != nil {
			t.Errorf("case %d client: %v", i, err)
		}
		if err := <-errc; err != nil {
			t.Errorf("case %d server: %v", i, err)
		}
	}
}

func TestSizeStr(t *testing.T) {
	for n, want := range map[int64]string{64: "64", 1000: "1000", 1024: "1k", 1536: "1.5k", 12800000: "12m", 218103808: "208m", 6 << 20: "6m", 100000: "97k", 9000: "8.7k"} {
		if got := sizeStr(n); got != want {
			t.Errorf("sizeStr(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{1: "1", 1000: "1k", 100000: "100k", 2500000: "2m"} {
		if got := cntStr(n); got != want {
			t.Errorf("cntStr(%d) = %q, want %q", n, got, want)
		}
	}
}

// Test options and address formats rstream knows but this one refuses,
// and bad values, fail before anything is opened, with errors that say
// why.
func TestRstreamOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-T", "f"}, "fork"},
		{[]string{"-T", "forked"}, "fork"},
		{[]string{"-T", "x"}, "unknown test option"},
		{[]string{"-T", "blo"}, "unknown test option"},
		{[]string{"-f", "gid", "-s", "10.0.0.1"}, "not a GID"},
		{[]string{"-f", "gid", "-s", "fe80::1"}, "link-local"},
		{[]string{"-f", "ip", "-s", "localhost"}, "not a numeric address"},
		{[]string{"-s", "10.0.0.1", "extra"}, "unexpected arguments"},
	} {
		err := runTool("rstream", tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rstream %q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	o := &rstreamOpts{}
	for _, v := range []string{"n", "nonblocking", "a", "async", "r", "resolve", "s", "sockets", "v", "verify", "b", "blocking"} {
		if err := o.testOption(v); err != nil {
			t.Errorf("-T %s: %v", v, err)
		}
	}
	if o.nonblock || !o.tcp || !o.verify {
		t.Errorf("after -T ... b: nonblock %v tcp %v verify %v, want false true true", o.nonblock, o.tcp, o.verify)
	}
}

// runTool runs the tool name with args, its output discarded.
func runTool(name string, args []string) error {
	return Run(context.Background(), append([]string{name}, args...), io.Discard, io.Discard)
}
