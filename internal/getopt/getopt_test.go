package getopt

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type opts struct {
	dev, size  string
	list, verb bool
	iters      int
	log        []string
}

func table(o *opts) []Option {
	return []Option{
		{'d', "ib-dev", true, String(&o.dev)},
		{'s', "size", true, String(&o.size)},
		{'l', "list", false, func(string) error { o.list = true; return ErrStop }},
		{'v', "verbose", false, Flag(&o.verb)},
		{'n', "iters", true, Int(&o.iters, "-n")},
		{0, "ib-port", true, func(a string) error { o.log = append(o.log, "port="+a); return nil }},
		{0, "iodp", false, func(string) error { return errors.New("iodp refused") }},
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		want     opts
		operands []string
		err      string
	}{
		{args: []string{"-d", "rxe0", "host"}, want: opts{dev: "rxe0"}, operands: []string{"host"}},
		{args: []string{"host", "-drxe0", "-vs64"}, want: opts{dev: "rxe0", verb: true, size: "64"}, operands: []string{"host"}},
		{args: []string{"--size=4096", "--ib-dev", "x"}, want: opts{size: "4096", dev: "x"}},
		{args: []string{"--it", "5"}, want: opts{iters: 5}},
		{args: []string{"-n", "0x10"}, want: opts{iters: 16}},
		{args: []string{"--ib-p=2"}, want: opts{log: []string{"port=2"}}},
		{args: []string{"-v", "--", "-d", "x"}, want: opts{verb: true}, operands: []string{"-d", "x"}},
		{args: []string{"-vl", "-d"}, want: opts{verb: true, list: true}}, // -l stops: -d is not looked at
		{args: []string{"-"}, operands: []string{"-"}},
		{args: []string{"-x"}, err: "invalid option -- 'x'"},
		{args: []string{"-d"}, err: "option requires an argument -- 'd'"},
		{args: []string{"--ib"}, err: "option '--ib' is ambiguous; possibilities: '--ib-dev' '--ib-port'"},
		{args: []string{"--nope"}, err: "unrecognized option '--nope'"},
		{args: []string{"--size"}, err: "option '--size' requires an argument"},
		{args: []string{"--verbose=1"}, err: "option '--verbose' doesn't allow an argument"},
		{args: []string{"-n", "five"}, err: `invalid value "five" for -n: want an integer`},
		{args: []string{"--iodp"}, err: "iodp refused"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var o opts
			operands, err := Parse(table(&o), tc.args)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(o, tc.want) || !reflect.DeepEqual(operands, tc.operands) {
				t.Fatalf("got %+v %q, want %+v %q", o, operands, tc.want, tc.operands)
			}
		})
	}
}

// TestErrorType: a malformed command line is an *Error (a tool prints its
// usage for it); an error from Set is returned unchanged.
func TestErrorType(t *testing.T) {
	var o opts
	_, err := Parse(table(&o), []string{"-x"})
	var ge *Error
	if !errors.As(err, &ge) {
		t.Fatalf("%T %v: want *Error", err, err)
	}
	_, err = Parse(table(&o), []string{"--iodp"})
	if errors.As(err, &ge) {
		t.Fatalf("Set's error came back as *Error: %v", err)
	}
}

// FuzzParse: any command line parses or fails with an error; nothing
// panics, and every operand is one of the arguments.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"-d x host", "--size=4 -vl", "--ib -n", "-- -x", "-s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var o opts
		args := strings.Fields(line)
		operands, _ := Parse(table(&o), args)
		if len(operands) > len(args) {
			t.Fatalf("%d operands from %d arguments", len(operands), len(args))
		}
	})
}
