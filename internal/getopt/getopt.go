// Package getopt parses command lines the way glibc's getopt_long does,
// so that softrdma's tools accept what the rdma-core, perftest and
// librdmacm tools they mirror accept: clustered short options ("-lv"),
// attached or separate values ("-s4096", "-s 4096"), "--name=value" and
// "--name value", unambiguous prefixes of long names ("--it 5"), GNU
// argument permutation (operands may come before options) and "--" to end
// the options. Its complaints are worded as getopt's.
package getopt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Option is one entry of an option table.
type Option struct {
	// Short is the one-letter name ('d' for -d); 0 for a long-only option.
	Short byte
	// Long is the long name ("ib-dev" for --ib-dev); "" for a short-only
	// option.
	Long string
	// HasArg says the option takes a value (getopt's required_argument).
	HasArg bool
	// Set applies the option, with its value ("" when it takes none). An
	// error it returns ends the parse and is returned as it is; ErrStop
	// ends the parse without an error.
	Set func(arg string) error
}

// ErrStop, returned by an Option's Set, ends the parse there: what follows
// is not looked at (ibv_devinfo's -l acts where it appears).
var ErrStop = errors.New("getopt: stop")

// Error is a malformed command line, worded as getopt prints it
// ("invalid option -- 'x'", "unrecognized option '--foo'").
type Error struct {
	Msg string
}

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// Parse parses args against table and returns the operands (the
// arguments that are not options, in order). A malformed command line is
// an *Error; an error from an Option's Set is returned unchanged.
func Parse(table []Option, args []string) (operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			opt, err := lookupLong(table, name)
			if err != nil {
				return operands, err
			}
			if opt.HasArg && !hasVal {
				if i+1 >= len(args) {
					return operands, errorf("option '--%s' requires an argument", opt.Long)
				}
				i++
				val = args[i]
			} else if !opt.HasArg && hasVal {
				return operands, errorf("option '--%s' doesn't allow an argument", opt.Long)
			}
			if err := opt.Set(val); err != nil {
				return operands, stop(err)
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				opt := lookupShort(table, a[j])
				if opt == nil {
					return operands, errorf("invalid option -- '%c'", a[j])
				}
				if !opt.HasArg {
					if err := opt.Set(""); err != nil {
						return operands, stop(err)
					}
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return operands, errorf("option requires an argument -- '%c'", a[j])
					}
					i++
					val = args[i]
				}
				if err := opt.Set(val); err != nil {
					return operands, stop(err)
				}
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// stop turns ErrStop into the end of a successful parse.
func stop(err error) error {
	if err == ErrStop {
		return nil
	}
	return err
}

func lookupShort(table []Option, c byte) *Option {
	for i := range table {
		if table[i].Short == c && c != 0 {
			return &table[i]
		}
	}
	return nil
}

// lookupLong finds a long option by its name or, as getopt_long does, by
// a prefix that only one option has.
func lookupLong(table []Option, name string) (*Option, error) {
	var found *Option
	var possible []string
	for i := range table {
		switch l := table[i].Long; {
		case l == "":
		case l == name:
			return &table[i], nil
		case name != "" && strings.HasPrefix(l, name):
			found = &table[i]
			possible = append(possible, "'--"+l+"'")
		}
	}
	switch {
	case len(possible) > 1:
		return nil, errorf("option '--%s' is ambiguous; possibilities: %s", name, strings.Join(possible, " "))
	case found == nil:
		return nil, errorf("unrecognized option '--%s'", name)
	}
	return found, nil
}

// String returns a Set that stores the option's value in dst.
func String(dst *string) func(string) error {
	return func(a string) error { *dst = a; return nil }
}

// Flag returns a Set, for an option without a value, that sets dst.
func Flag(dst *bool) func(string) error {
	return func(string) error { *dst = true; return nil }
}

// Int returns a Set that parses the option's value as a decimal integer
// (or 0x hexadecimal, 0 octal, as strtol with base 0) into dst. name is
// the option as the error shows it ("-n", "--iters").
func Int(dst *int, name string) func(string) error {
	return func(a string) error {
		v, err := strconv.ParseInt(a, 0, 0)
		if err != nil {
			return fmt.Errorf("invalid value %q for %s: want an integer", a, name)
		}
		*dst = int(v)
		return nil
	}
}
