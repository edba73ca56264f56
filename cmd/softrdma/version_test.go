package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionText(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Path: "github.com/softrdma/softrdma/cmd/softrdma",
		Main: debug.Module{Path: "github.com/softrdma/softrdma", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-27T03:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	got := versionText(info)
	for _, want := range []string{"softrdma v0.3.0\n", "module:   github.com/softrdma/softrdma\n",
		"revision: 0123456789abcdef0123456789abcdef01234567 (with uncommitted changes)\n",
		"time:     2026-11-27T03:00:00Z\n", "go:       go1.26.0 "} {
		if !strings.Contains(got, want) {
			t.Errorf("version output lacks %q:\n%s", want, got)
		}
	}
	got = versionText(&debug.BuildInfo{Main: debug.Module{Path: "github.com/softrdma/softrdma"}})
	if !strings.Contains(got, "softrdma (devel)\n") || !strings.Contains(got, "revision: unknown") {
		t.Errorf("without a version and VCS information:\n%s", got)
	}
}
