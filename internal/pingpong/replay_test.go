package pingpong

import "github.com/softrdma/softrdma/internal/replay"

// The capture replay helpers live in internal/replay, shared with the other
// exchange package's tests.
type (
	tcpEvent   = replay.Event
	scriptConn = replay.ScriptConn
)

var (
	loadTCP       = replay.LoadTCP
	stream        = replay.Stream
	newScriptConn = replay.NewScriptConn
	checkWritten  = replay.CheckWritten
)
