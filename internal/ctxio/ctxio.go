// Package ctxio ties a context to a net.Conn's blocking I/O, for the
// out-of-band exchanges (perftest's and the pingpongs' TCP handshakes)
// that net.Conn's deadlines alone cannot cancel.
package ctxio

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Do runs f, making conn's blocked I/O fail when ctx is done, and reports
// ctx's error in that case, wrapping f's if it failed too.
func Do(ctx context.Context, conn net.Conn, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil {
		return f()
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	err := f()
	if !stop() {
		// The deadline was (or is being) forced into the past: conn is no
		// longer usable, say why.
		if err == nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
