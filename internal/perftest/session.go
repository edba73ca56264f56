package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"

	"github.com/softrdma/softrdma/internal/ctxio"
)

// Config describes a test run as far as the exchange depends on it. Both
// sides must describe the same test (perftest does not check that either).
type Config struct {
	Role   Role
	Verb   Verb
	Kind   Kind
	NumQPs int // -q; 0 means 1

	Duplex   bool // -b: bidirectional bandwidth test (BW only)
	RunAll   bool // -a: every message size from 2 bytes to 8 MiB
	Duration bool // -D: run for a time instead of an iteration count

	// WithGID selects the 108-byte key messages that carry the GID. perftest
	// uses them whenever a GID index is set: always on RoCE (it picks index
	// 0 itself on Ethernet links) and on InfiniBand with -x. Both sides
	// must agree, or the first key swap reads the wrong number of bytes.
	WithGID bool

	// ReportPerPort (--report-per-port) adds four fields to the report swap.
	ReportPerPort bool

	// Version is the string sent in the version swap, at most 15 bytes;
	// "" means Version ("6.06").
	Version string
}

// SysInfo is what this side contributes to the negotiation.
type SysInfo struct {
	PageSize      int32 // perftest's cycle_buffer: sysconf(_SC_PAGESIZE)
	CacheLineSize int32 // 64 on x86-64 and most arm64
	MTU           MTU   // this side's path MTU: the port's active MTU, or -m
}

// DefaultSysInfo returns this machine's page size, a 64-byte cache line and
// the given MTU.
func DefaultSysInfo(mtu MTU) SysInfo {
	return SysInfo{PageSize: int32(os.Getpagesize()), CacheLineSize: 64, MTU: mtu}
}

// Negotiated is the outcome of Session.Negotiate.
type Negotiated struct {
	RemoteVersion string // the peer's version string, up to its first NUL

	// PageSize and CacheLineSize are the larger of both sides' values,
	// which perftest uses from then on (check_sys_data).
	PageSize, CacheLineSize int32

	// MTU is the path MTU both sides use: the smaller of the two, or the
	// local one if the peer's is not a valid MTU (check_mtu).
	MTU MTU
	// RemoteMTU is the peer's MTU as sent, 0 if it could not be parsed.
	RemoteMTU MTU
}

// BWReport is a bandwidth result as perftest computes, prints and swaps it
// (struct bw_report_data). Bandwidths are in MiB/s (perftest's "MB/sec") or
// in Gb/s with --report_gbits; message rates in millions per second.
type BWReport struct {
	Size    uint64 // message size in bytes
	Iters   uint64 // iterations times QPs
	BWPeak  float64
	BWAvg   float64
	MsgRate float64

	// Per-port averages, used with --report-per-port on dual-port runs.
	BWAvgPort1, MsgRatePort1, BWAvgPort2, MsgRatePort2 float64

	// CPUUtil is this side's CPU utilisation over the measured interval
	// (--cpu_util, CPUUtil); it is not exchanged with the peer.
	CPUUtil float64
}

// Errors returned (wrapped) by Session.
var (
	// ErrIncompatibleVersion: the peer's version is older than
	// MinPeerVersion ("Current implementation is not compatible with
	// versions older than 5.70").
	ErrIncompatibleVersion = errors.New("perftest: peer version is older than 5.70")
	// ErrGIDMismatch: one side's GID is IPv4-based and the other's is not.
	ErrGIDMismatch = errors.New("perftest: incompatible GID types (one IPv4-mapped, one not)")
	// ErrOutOfOrder: a Session method was called at the wrong point of the
	// test, where perftest would not perform that step.
	ErrOutOfOrder = errors.New("perftest: exchange step out of order")
)

type sessionState int

const (
	stateNew sessionState = iota
	stateNegotiated
	stateKeyed
	stateFinished
)

// Session runs perftest's out-of-band exchange over one connection, in the
// order perftest 4.5 performs it for the configured test:
//
//	Negotiate → ExchangeKeys → (if Runs) { BeforeRun → measure → AfterRun }… → Finish
//
// BeforeRun/AfterRun bracket each measurement: once, or once per message
// size with RunAll. A Session is not safe for concurrent use. It never
// closes the connection; close it after Finish.
type Session struct {
	conn net.Conn  // the TCP exchange, or
	msgr Messenger // the rdma_cm exchange (NewCMSession)
	// ctx is the context of the step under way, for msgr.
	ctx           context.Context
	cfg           Config
	state         sessionState
	remoteVersion float64
	barrierKey    []byte // QP 0's key, resent at every barrier
	qpsConnected  bool   // ConnectQPs has run
}

// NewSession returns a Session that speaks for cfg.Role on conn.
func NewSession(conn net.Conn, cfg Config) (*Session, error) {
	if conn == nil {
		return nil, errors.New("perftest: NewSession without a connection")
	}
	return newSession(conn, nil, cfg)
}

// Messenger carries perftest's exchange over a connected RC QP, as
// perftest does with -R (rdma_cm): every message is one SEND, received
// into a single posted receive of DestBinarySize bytes (perftest's
// rdma_write_data, rdma_read_data). Implementations must return when ctx
// is done, with ctx's error.
type Messenger interface {
	// SendMsg sends b as one message and waits for its completion.
	SendMsg(ctx context.Context, b []byte) error
	// RecvMsg waits for the next message and copies its first len(b)
	// bytes into b (perftest copies as many bytes as it expects, whatever
	// the length received).
	RecvMsg(ctx context.Context, b []byte) error
}

// NewCMSession returns a Session that speaks for cfg.Role over m, the
// exchange perftest 4.5 runs with -R: the same steps as over TCP, but
// each swap is one message each way, the keys are struct pingpong_dest in
// binary (MarshalDestBinary; Config.WithGID is ignored), ExchangeKeys
// does not compare GID types (perftest skips the check), Finish writes
// no "done", and ConnectQPs brackets the rdma_cm connection of the test's
// QPs with its two barriers.
func NewCMSession(m Messenger, cfg Config) (*Session, error) {
	if m == nil {
		return nil, errors.New("perftest: NewCMSession without a messenger")
	}
	return newSession(nil, m, cfg)
}

func newSession(conn net.Conn, m Messenger, cfg Config) (*Session, error) {
	if cfg.NumQPs == 0 {
		cfg.NumQPs = 1
	}
	if cfg.Version == "" {
		cfg.Version = Version
	}
	switch {
	case cfg.Role != Server && cfg.Role != Client:
		return nil, fmt.Errorf("perftest: invalid role %v", cfg.Role)
	case cfg.Verb < Send || cfg.Verb > Atomic:
		return nil, fmt.Errorf("perftest: invalid verb %v", cfg.Verb)
	case cfg.Kind != Lat && cfg.Kind != BW:
		return nil, fmt.Errorf("perftest: invalid test kind %v", cfg.Kind)
	case cfg.NumQPs < 0:
		return nil, fmt.Errorf("perftest: invalid number of QPs %d", cfg.NumQPs)
	case cfg.Duplex && cfg.Kind != BW:
		return nil, errors.New("perftest: bidirectional (-b) is for bandwidth tests only")
	case len(cfg.Version) > versionSize-1:
		return nil, fmt.Errorf("perftest: version %q longer than %d bytes", cfg.Version, versionSize-1)
	}
	return &Session{conn: conn, msgr: m, cfg: cfg}, nil
}

// Config returns the session's configuration with defaults filled in.
func (s *Session) Config() Config { return s.cfg }

// versionSize is MAX_VERSION, the size of the version swap.
const versionSize = 16

// Negotiate performs the swaps perftest does right after connecting:
// versions (refusing peers older than MinPeerVersion), page and cache line
// sizes, and the path MTU. It must be called first.
func (s *Session) Negotiate(ctx context.Context, local SysInfo) (Negotiated, error) {
	if s.state != stateNew {
		return Negotiated{}, fmt.Errorf("%w: Negotiate called twice", ErrOutOfOrder)
	}
	if !local.MTU.Valid() {
		return Negotiated{}, fmt.Errorf("perftest: invalid local MTU %d", int(local.MTU))
	}
	var n Negotiated
	err := s.do(ctx, func() error {
		var v [versionSize]byte
		copy(v[:], s.cfg.Version)
		rv, err := s.swap(v[:], "versions")
		if err != nil {
			return err
		}
		n.RemoteVersion = cString(rv)
		s.remoteVersion = atof(n.RemoteVersion)
		if s.remoteVersion < MinPeerVersion {
			return fmt.Errorf("%w: peer sent %q", ErrIncompatibleVersion, n.RemoteVersion)
		}

		rp, err := s.swapInt32(local.PageSize, "page size")
		if err != nil {
			return err
		}
		rc, err := s.swapInt32(local.CacheLineSize, "cache line size")
		if err != nil {
			return err
		}
		n.PageSize, n.CacheLineSize = max(local.PageSize, rp), max(local.CacheLineSize, rc)

		// "%d" of the enum and its NUL: two bytes for any valid MTU.
		rm, err := s.swap([]byte{byte('0' + local.MTU), 0}, "MTU")
		if err != nil {
			return err
		}
		if v := atoi(cString(rm)); v <= 255 { // not truncated into a valid MTU
			n.RemoteMTU = MTU(v)
		}
		n.MTU = local.MTU
		if n.RemoteMTU.Valid() && local.MTU > n.RemoteMTU {
			n.MTU = n.RemoteMTU
		}
		if !n.RemoteMTU.Valid() {
			n.RemoteMTU = 0
		}
		return nil
	})
	if err != nil {
		return Negotiated{}, err
	}
	s.state = stateNegotiated
	return n, nil
}

// ExchangeKeys performs every key swap and barrier from the end of the
// negotiation up to the measurement, in the test's order, and calls connect
// (if not nil) with the peer's keys where perftest moves its QPs to RTR and
// RTS (ctx_connect), after checking that the GID types agree. local holds
// one key per QP (Config.NumQPs). It returns the peer's keys as last
// received (the second round; they equal the first).
func (s *Session) ExchangeKeys(ctx context.Context, local []Dest, connect func(remote []Dest) error) ([]Dest, error) {
	if s.state != stateNegotiated {
		return nil, fmt.Errorf("%w: ExchangeKeys before Negotiate or twice", ErrOutOfOrder)
	}
	if len(local) != s.cfg.NumQPs {
		return nil, fmt.Errorf("perftest: %d local keys for %d QPs", len(local), s.cfg.NumQPs)
	}
	s.barrierKey = s.marshalKey(local[0])
	var remote []Dest
	err := s.do(ctx, func() error {
		// The latency tests of one-sided verbs open with an extra barrier.
		if s.cfg.Kind == Lat && s.cfg.Verb != Send {
			if err := s.barrier(); err != nil {
				return err
			}
		}
		first, err := s.swapKeys(local)
		if err != nil {
			return err
		}
		if s.msgr == nil && !GIDCompatible(local[0].GID, first[0].GID) {
			return ErrGIDMismatch
		}
		if connect != nil {
			if err := connect(first); err != nil {
				return fmt.Errorf("perftest: connect QPs: %w", err)
			}
		}
		// "An additional handshake is required after moving qp to RTR": the
		// send tests do it before the second key round, the others after.
		if s.cfg.Verb == Send {
			if err := s.barrier(); err != nil {
				return err
			}
		}
		if remote, err = s.swapKeys(local); err != nil {
			return err
		}
		if s.cfg.Verb != Send {
			return s.barrier()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.state = stateKeyed
	return remote, nil
}

// Runs reports whether this side performs the measurement. perftest's
// server does not in non-duplex write/read/atomic bandwidth tests and in
// read/atomic latency tests: it goes straight to Finish, which waits there
// for the client.
func (s *Session) Runs() bool {
	if s.cfg.Role == Client || s.cfg.Verb == Send {
		return true
	}
	if s.cfg.Kind == BW {
		return s.cfg.Duplex
	}
	return s.cfg.Verb == Write
}

// BeforeRun performs the sync perftest does right before a measurement
// (one barrier in send tests, after the receives are posted, and in duplex
// bandwidth tests; nothing otherwise). Call it before each measurement.
func (s *Session) BeforeRun(ctx context.Context) error {
	if s.state != stateKeyed || !s.Runs() {
		return fmt.Errorf("%w: BeforeRun", ErrOutOfOrder)
	}
	if s.cfg.Verb == Send || (s.cfg.Kind == BW && s.cfg.Duplex) {
		return s.do(ctx, s.barrier)
	}
	return nil
}

// AfterRun performs what perftest does right after a measurement: in duplex
// bandwidth tests it swaps reports (preceded by a barrier for write/read with
// RunAll) and returns the peer's with ok true; send bandwidth tests with
// RunAll end each size with a barrier. local is this side's result (only
// sent in duplex tests). perftest prints SumBW(local, remote) in duplex
// tests.
func (s *Session) AfterRun(ctx context.Context, local BWReport) (remote BWReport, ok bool, err error) {
	if s.state != stateKeyed || !s.Runs() {
		return BWReport{}, false, fmt.Errorf("%w: AfterRun", ErrOutOfOrder)
	}
	if s.cfg.Kind != BW {
		return BWReport{}, false, nil
	}
	err = s.do(ctx, func() error {
		var err error
		switch s.cfg.Verb {
		case Write, Read:
			if !s.cfg.Duplex {
				return nil
			}
			if s.cfg.RunAll {
				if err := s.barrier(); err != nil {
					return err
				}
			}
			remote, err = s.swapReport(local)
			ok = err == nil
		case Atomic:
			if !s.cfg.Duplex {
				return nil
			}
			remote, err = s.swapReport(local)
			ok = err == nil
		case Send:
			if s.cfg.Duplex && !s.cfg.Duration {
				if remote, err = s.swapReport(local); err != nil {
					return err
				}
				ok = true
			}
			if s.cfg.RunAll {
				err = s.barrier()
			}
		}
		return err
	})
	return remote, ok, err
}

// Finish ends the test as perftest does. In non-duplex write/read/atomic
// bandwidth tests both sides barrier and swap reports, and the peer's is
// returned with ok true: the server (which did not run) gets the client's
// result, which perftest's server prints, and sends local, which perftest
// leaves uninitialized. Then, except in write latency tests (which just
// exit), both sides barrier once more and write "done\x00"; the peer's
// "done" is not read, as perftest does not read it either.
func (s *Session) Finish(ctx context.Context, local BWReport) (remote BWReport, ok bool, err error) {
	if s.state != stateKeyed {
		return BWReport{}, false, fmt.Errorf("%w: Finish", ErrOutOfOrder)
	}
	err = s.do(ctx, func() error {
		if s.cfg.Kind == BW && s.cfg.Verb != Send && !s.cfg.Duplex {
			if err := s.barrier(); err != nil {
				return err
			}
			var err error
			if remote, err = s.swapReport(local); err != nil {
				return err
			}
			ok = true
		}
		if s.cfg.Kind == Lat && s.cfg.Verb == Write {
			return nil
		}
		return s.closeConnection()
	})
	s.state = stateFinished
	return remote, ok, err
}

// Barrier is perftest's bare ctx_hand_shake: QP 0's key is swapped again
// and nothing is learned. It is available once ExchangeKeys has started,
// for flows Session does not script.
func (s *Session) Barrier(ctx context.Context) error {
	if s.barrierKey == nil {
		return fmt.Errorf("%w: Barrier before ExchangeKeys", ErrOutOfOrder)
	}
	return s.do(ctx, s.barrier)
}

// HandShake swaps one key (ctx_hand_shake) and returns the peer's.
func (s *Session) HandShake(ctx context.Context, local Dest) (Dest, error) {
	var d Dest
	err := s.do(ctx, func() error {
		r, err := s.swapKeys([]Dest{local})
		if err == nil {
			d = r[0]
		}
		return err
	})
	return d, err
}

// SwapReports swaps bandwidth reports (xchg_bw_reports) and returns the
// peer's.
func (s *Session) SwapReports(ctx context.Context, local BWReport) (BWReport, error) {
	var r BWReport
	err := s.do(ctx, func() error {
		var err error
		r, err = s.swapReport(local)
		return err
	})
	return r, err
}

// Swap is an extension step between Negotiate and ExchangeKeys, not
// perftest's (softrdma's --secure key exchange uses it; a perftest peer
// would read it as keys and fail): it sends mine and receives as many
// bytes, the client first. what names the step in errors.
func (s *Session) Swap(ctx context.Context, mine []byte, what string) ([]byte, error) {
	if s.state != stateNegotiated {
		return nil, fmt.Errorf("%w: Swap outside Negotiate..ExchangeKeys", ErrOutOfOrder)
	}
	var theirs []byte
	err := s.do(ctx, func() error {
		var err error
		theirs, err = s.swap(mine, what)
		return err
	})
	return theirs, err
}

// ConnectQPs is create_rdma_cm_connection's part of the exchange, for a
// Session over rdma_cm, between Negotiate and ExchangeKeys: a barrier
// (with an all-zero key: perftest's my_dest is still empty), connect
// (which connects the test's QPs through rdma_cm: the client dials, the
// server accepts), and another barrier.
func (s *Session) ConnectQPs(ctx context.Context, connect func(context.Context) error) error {
	if s.state != stateNegotiated || s.msgr == nil || s.qpsConnected {
		return fmt.Errorf("%w: ConnectQPs is for rdma_cm sessions, once, after Negotiate", ErrOutOfOrder)
	}
	zero := MarshalDestBinary(Dest{})
	sync := func() error {
		b, err := s.swap(zero, "barrier")
		if err == nil {
			_, err = ParseDestBinary(b)
		}
		return err
	}
	s.qpsConnected = true
	return s.do(ctx, func() error {
		if err := sync(); err != nil {
			return err
		}
		if err := connect(ctx); err != nil {
			return fmt.Errorf("perftest: connect QPs through rdma_cm: %w", err)
		}
		return sync()
	})
}

// do runs one step f within ctx.
func (s *Session) do(ctx context.Context, f func() error) error {
	if s.msgr == nil {
		return ctxio.Do(ctx, s.conn, f)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.ctx = ctx
	defer func() { s.ctx = nil }()
	return f()
}

// swap sends mine and receives as many bytes, in the role's order.
func (s *Session) swap(mine []byte, what string) ([]byte, error) {
	theirs := make([]byte, len(mine))
	if s.cfg.Role == Client {
		if err := s.send(mine); err != nil {
			return nil, fmt.Errorf("perftest: send %s: %w", what, err)
		}
	}
	if err := s.recv(theirs); err != nil {
		return nil, fmt.Errorf("perftest: receive %s: %w", what, err)
	}
	if s.cfg.Role == Server {
		if err := s.send(mine); err != nil {
			return nil, fmt.Errorf("perftest: send %s: %w", what, err)
		}
	}
	return theirs, nil
}

func (s *Session) send(b []byte) error {
	if s.msgr != nil {
		return s.msgr.SendMsg(s.ctx, b)
	}
	_, err := s.conn.Write(b)
	return err
}

func (s *Session) recv(b []byte) error {
	if s.msgr != nil {
		return s.msgr.RecvMsg(s.ctx, b)
	}
	_, err := io.ReadFull(s.conn, b)
	return err
}

// marshalKey and parseKey are the key format of the session's transport.
func (s *Session) marshalKey(d Dest) []byte {
	if s.msgr != nil {
		return MarshalDestBinary(d)
	}
	return MarshalDest(d, s.cfg.WithGID)
}

func (s *Session) parseKey(b []byte) (Dest, error) {
	if s.msgr != nil {
		return ParseDestBinary(b)
	}
	return ParseDest(b, s.cfg.WithGID)
}

func (s *Session) swapInt32(v int32, what string) (int32, error) {
	b, err := s.swap(binary.BigEndian.AppendUint32(nil, uint32(v)), what)
	if err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}

func (s *Session) swapUint64(v uint64, what string) (uint64, error) {
	b, err := s.swap(binary.BigEndian.AppendUint64(nil, v), what)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

func (s *Session) swapFloat64(v float64, what string) (float64, error) {
	u, err := s.swapUint64(math.Float64bits(v), what)
	return math.Float64frombits(u), err
}

func (s *Session) swapKeys(local []Dest) ([]Dest, error) {
	remote := make([]Dest, len(local))
	for i, d := range local {
		b, err := s.swap(s.marshalKey(d), "key of QP "+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		if remote[i], err = s.parseKey(b); err != nil {
			return nil, err
		}
	}
	return remote, nil
}

func (s *Session) barrier() error {
	b, err := s.swap(s.barrierKey, "barrier")
	if err != nil {
		return err
	}
	_, err = s.parseKey(b)
	return err
}

// swapReport is xchg_bw_reports: one swap per field, 64-bit big-endian
// integers and doubles (peers of version 5.33 and up, which is all that
// Negotiate accepts).
func (s *Session) swapReport(local BWReport) (BWReport, error) {
	var r BWReport
	var err error
	if r.Size, err = s.swapUint64(local.Size, "report size"); err != nil {
		return r, err
	}
	if r.Iters, err = s.swapUint64(local.Iters, "report iterations"); err != nil {
		return r, err
	}
	fields := []struct {
		mine   float64
		theirs *float64
	}{
		{local.BWPeak, &r.BWPeak},
		{local.BWAvg, &r.BWAvg},
		{local.MsgRate, &r.MsgRate},
	}
	if s.cfg.ReportPerPort {
		fields = append(fields, []struct {
			mine   float64
			theirs *float64
		}{
			{local.BWAvgPort1, &r.BWAvgPort1},
			{local.MsgRatePort1, &r.MsgRatePort1},
			{local.BWAvgPort2, &r.BWAvgPort2},
			{local.MsgRatePort2, &r.MsgRatePort2},
		}...)
	}
	for _, f := range fields {
		if *f.theirs, err = s.swapFloat64(f.mine, "report"); err != nil {
			return r, err
		}
	}
	return r, nil
}

// closeConnection is ctx_close_connection: a barrier, then over TCP "done"
// with its NUL, which the peer never reads.
func (s *Session) closeConnection() error {
	if err := s.barrier(); err != nil {
		return err
	}
	if s.msgr != nil {
		return nil
	}
	if _, err := io.WriteString(s.conn, "done\x00"); err != nil {
		return fmt.Errorf("perftest: send done: %w", err)
	}
	return nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// atof parses the longest decimal prefix of s ("6.06", "5.70abc") as C's
// atof does for such strings; 0 if there is none.
func atof(s string) float64 {
	end, dot := 0, false
	for ; end < len(s); end++ {
		if c := s[end]; c == '.' && !dot {
			dot = true
		} else if c < '0' || c > '9' {
			break
		}
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return v
}

// atoi parses the leading decimal digits of s as strtol(s, NULL, 10) does
// for non-negative numbers; 0 if there are none.
func atoi(s string) int {
	n := 0
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9' && n < 1<<20; i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}
