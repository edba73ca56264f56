// Package layering holds the test that keeps softrdma's imports pointing
// one way: wire, verbs, transport, congestion → engine → providers → cm, ULPs → cmd.
package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/softrdma/softrdma"

// allowed lists, for each package (by path prefix, most specific first),
// the module packages it may import. Standard library imports are always
// allowed; third-party imports only where listed under "external".
var rules = []struct {
	pkg      string
	allow    []string
	external []string
}{
	{"wire", nil, nil},
	{"verbs/verbstest", []string{"verbs", "cm"}, nil}, // the providers' conformance suite
	{"verbs", nil, nil},
	{"transport/udp", []string{"transport", "wire"}, []string{"golang.org/x/sys", "golang.org/x/net"}}, // address sharing comes in through Config.Share
	{"transport/capture", []string{"transport"}, []string{"github.com/gopacket/gopacket"}},
	{"transport", nil, nil},
	{"congestion", nil, nil},
	{"internal/netsim", []string{"transport", "wire"}, nil},
	{"internal/bench", []string{"verbs", "cm", "internal/spin", "internal/perftest"}, nil},
	{"internal/spin", nil, nil},
	{"internal/memmove", nil, []string{"golang.org/x/sys"}},                             // payload copies (x/sys/cpu: ERMS)
	{"internal/cmattack", []string{"wire"}, nil},                                        // a hostile CM peer for tests
	{"internal/reuseport", nil, []string{"github.com/cilium/ebpf", "golang.org/x/sys"}}, // address sharing: eBPF steering, SO_REUSEPORT
	{"examples", []string{""}, []string{""}},
	{"internal/roce", []string{"wire", "verbs", "transport", "congestion", "internal/spin", "internal/verbsobj", "internal/memmove"}, nil},
	{"internal/verbsobj", []string{"verbs"}, nil}, // the verbs objects' rules every provider shares
	{"internal/perftest", []string{"verbs", "internal/ctxio"}, nil},
	{"internal/pingpong", []string{"internal/ctxio"}, nil},
	{"internal/ctxio", nil, nil},
	{"internal/replay", []string{"internal/pcapfile"}, nil},
	{"internal/pcapfile", nil, []string{"github.com/gopacket/gopacket"}},
	{"provider/ibverbs", []string{"verbs", "internal/verbsobj"}, nil}, // the kernel devices through libibverbs (cgo)
	{"provider", []string{"wire", "verbs", "transport", "congestion", "internal/roce", "internal/netsim", "internal/spin", "internal/reuseport", "internal/verbsobj", "internal/memmove"}, []string{"golang.org/x/sys"}},
	{"cm", []string{"verbs", "wire"}, nil},                                                // wire: the CM MAD layouts (DESIGN: MAD layouts live in wire)
	{"rdmanet", []string{"verbs", "cm"}, nil},                                             // sockets over RDMA (rsocket)
	{"nvmeof", []string{"verbs", "cm"}, []string{"golang.org/x/sys"}},                     // NVMe over Fabrics, a ULP like rdmanet
	{"internal/nvmecli", []string{"verbs", "cm", "nvmeof", "internal/tools/device"}, nil}, // the nvmet and nvme tools
	{"metrics", []string{"provider/soft", "verbs"}, []string{"github.com/prometheus"}},
	{"cmd", []string{""}, []string{""}},            // the CLI may import anything
	{"clib", []string{""}, []string{""}},           // the C library (libibverbs.so.1), a program like the CLI
	{"internal/tools", []string{""}, []string{""}}, // so may the tools it dispatches to
	{"internal/getopt", nil, nil},
	{"internal/layering", nil, nil},
	{"test", []string{""}, []string{""}},
	{"bench", []string{""}, []string{""}},
}

func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			checked++
			if strings.HasPrefix(p, module+"/cmd") {
				t.Errorf("%s imports %s: nothing may import cmd/", path, p)
			}
			if p == "C" && !strings.HasPrefix(rel, "provider/ibverbs") && !strings.HasPrefix(rel, "clib/") {
				t.Errorf("%s imports \"C\": only provider/ibverbs and the C library (clib/) may use cgo", path)
			}
			if isTest {
				continue // tests may assemble higher layers
			}
			if msg := check(rel, p); msg != "" {
				t.Errorf("%s: %s", path, msg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no imports checked: is the walk rooted at the module?")
	}
}

func check(pkg, imp string) string {
	stdlib := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
	if stdlib || imp == "C" {
		return ""
	}
	for _, r := range rules {
		if pkg != r.pkg && !strings.HasPrefix(pkg, r.pkg+"/") {
			continue
		}
		if strings.HasPrefix(imp, module+"/") || imp == module {
			target := strings.TrimPrefix(imp, module+"/")
			for _, a := range r.allow {
				if a == "" || target == a || strings.HasPrefix(target, a+"/") {
					return ""
				}
			}
			return "imports " + target + ", which is not below " + pkg + " in the layering"
		}
		for _, e := range r.external {
			if e == "" || strings.HasPrefix(imp, e) {
				return ""
			}
		}
		return "imports third-party " + imp + ", not allowed in " + pkg
	}
	return "package " + pkg + " has no layering rule; add one to internal/layering"
}

func TestRulesCatchViolations(t *testing.T) {
	if check("wire", module+"/verbs") == "" {
		t.Error("wire importing verbs passed")
	}
	if check("internal/roce", module+"/provider/soft") == "" {
		t.Error("roce importing a provider passed")
	}
	if check("internal/roce", module+"/wire") != "" {
		t.Error("roce importing wire failed")
	}
	if check("cm", module+"/verbs") != "" || check("cm", module+"/wire") != "" || check("cm", module+"/internal/roce") == "" {
		t.Error("cm may import verbs and wire and nothing else of ours")
	}
	if check("transport/udp", "golang.org/x/sys/unix") != "" {
		t.Error("udp importing x/sys failed")
	}
	// The transport is below the provider that assembles address
	// sharing: it takes the steering as a hook, never imports it.
	if check("transport/udp", module+"/internal/reuseport") == "" {
		t.Error("udp importing internal/reuseport passed")
	}
	if check("provider/soft", module+"/internal/reuseport") != "" {
		t.Error("provider/soft importing internal/reuseport failed")
	}
	if check("transport/udp", "github.com/cilium/ebpf") == "" || check("internal/reuseport", "github.com/cilium/ebpf/asm") != "" {
		t.Error("only internal/reuseport may load eBPF")
	}
}
