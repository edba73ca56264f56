package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/softrdma/softrdma/internal/ctxio"
)

// ClientExchange runs the client side of the pingpong exchange on conn: it
// sends local, reads the server's address and sends "done". It returns the
// server's address. It does not close conn (the C client closes it right
// away; the caller should too).
//
// ctx bounds the whole exchange: when it is done, conn's deadline is set to
// the past so blocked I/O returns, and ClientExchange returns ctx.Err().
func ClientExchange(ctx context.Context, conn net.Conn, local Dest) (Dest, error) {
	remote, err := ClientExchangeN(ctx, conn, []Dest{local})
	if err != nil {
		return Dest{}, err
	}
	return remote[0], nil
}

// ServerExchange runs the server side of the pingpong exchange on conn: it
// reads the client's address, calls connect with it (the C server moves its
// QP to RTR and RTS here, before answering, so that the client may send as
// soon as it has the reply), sends local and reads the client's 5-byte
// "done". connect may be nil. An error from connect aborts the exchange
// before anything is sent, as in the C server.
//
// The content of the final 5 bytes is not checked, as rdma-core does not
// check it either. ctx works as for ClientExchange.
func ServerExchange(ctx context.Context, conn net.Conn, local Dest, connect func(remote Dest) error) (Dest, error) {
	var hook func([]Dest) error
	if connect != nil {
		hook = func(r []Dest) error { return connect(r[0]) }
	}
	remote, err := ServerExchangeN(ctx, conn, []Dest{local}, hook)
	if err != nil {
		return Dest{}, err
	}
	return remote[0], nil
}

// ClientExchangeN is ClientExchange for programs that exchange several
// addresses: all of local is sent (one MsgSize message each), then as many
// messages are read back, then "done" is sent. For ibv_srq_pingpong pass
// exactly SRQMaxQP entries (PadSRQ does that), since it always exchanges 256.
func ClientExchangeN(ctx context.Context, conn net.Conn, local []Dest) ([]Dest, error) {
	if len(local) == 0 {
		return nil, errors.New("pingpong: no local address to send")
	}
	var remote []Dest
	err := ctxio.Do(ctx, conn, func() error {
		out := make([]byte, 0, len(local)*MsgSize)
		for _, d := range local {
			out = Append(out, d)
		}
		if _, err := conn.Write(out); err != nil {
			return fmt.Errorf("pingpong: send local address: %w", err)
		}
		var err error
		if remote, err = readDests(conn, len(local)); err != nil {
			return err
		}
		if _, err := io.WriteString(conn, doneMsg); err != nil {
			return fmt.Errorf("pingpong: send done: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return remote, nil
}

// ServerExchangeN is ServerExchange for several addresses: it reads
// len(local) messages, calls connect (if not nil) with them, sends all of
// local and reads the client's "done".
func ServerExchangeN(ctx context.Context, conn net.Conn, local []Dest, connect func(remote []Dest) error) ([]Dest, error) {
	if len(local) == 0 {
		return nil, errors.New("pingpong: no local address to send")
	}
	var remote []Dest
	err := ctxio.Do(ctx, conn, func() error {
		var err error
		if remote, err = readDests(conn, len(local)); err != nil {
			return err
		}
		if connect != nil {
			if err := connect(remote); err != nil {
				return fmt.Errorf("pingpong: connect to remote QP: %w", err)
			}
		}
		out := make([]byte, 0, len(local)*MsgSize)
		for _, d := range local {
			out = Append(out, d)
		}
		if _, err := conn.Write(out); err != nil {
			return fmt.Errorf("pingpong: send local address: %w", err)
		}
		var done [len(doneMsg)]byte
		if _, err := io.ReadFull(conn, done[:]); err != nil {
			return fmt.Errorf("pingpong: read done: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return remote, nil
}

// PadSRQ returns dests extended with zero addresses to SRQMaxQP entries, the
// number ibv_srq_pingpong always exchanges. It panics if len(dests) >
// SRQMaxQP.
func PadSRQ(dests []Dest) []Dest {
	if len(dests) > SRQMaxQP {
		panic("pingpong: more than SRQMaxQP addresses")
	}
	out := make([]Dest, SRQMaxQP)
	copy(out, dests)
	return out
}

func readDests(conn net.Conn, n int) ([]Dest, error) {
	buf := make([]byte, n*MsgSize)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, fmt.Errorf("pingpong: read remote address: %w", err)
	}
	out := make([]Dest, n)
	for i := range out {
		d, err := Parse(buf[i*MsgSize : (i+1)*MsgSize])
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}
