package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// runVersion prints the module version and the VCS revision the binary
// was built from, as the Go toolchain recorded them (runtime/debug).
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("this binary carries no build information (built without module support)")
	}
	_, err := io.WriteString(stdout, versionText(info))
	return err
}

// versionText is what softrdma version prints for info: the module's
// version ("(devel)" for a build from a checkout, v1.2.3 for go install
// module@v1.2.3), the commit and whether the tree had changes, the
// commit's time, and the Go version and platform.
func versionText(info *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	var b strings.Builder
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	path := info.Main.Path
	if path == "" {
		path = info.Path
	}
	fmt.Fprintf(&b, "softrdma %s\n", version)
	fmt.Fprintf(&b, "module:   %s\n", path)
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (with uncommitted changes)"
		}
		fmt.Fprintf(&b, "revision: %s\n", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, "time:     %s\n", t)
		}
	} else {
		fmt.Fprintf(&b, "revision: unknown (no VCS information: go build in a git clone records it; go run, -buildvcs=false and git worktrees record none)\n")
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(&b, "go:       %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
