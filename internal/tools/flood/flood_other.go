//go:build !linux

package flood

import (
	"context"
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

func flood(ctx context.Context, o *floodOpts) (*floodResult, error) {
	return nil, fmt.Errorf("softrdma flood runs on Linux only (it sends with sendmmsg and, with -spoof, a raw socket): %w", verbs.ErrNotSupported)
}
