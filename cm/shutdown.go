package cm

// DisconnectAll closes every established connection of the process, as
// Conn.Close does (each sends its DREQ), and returns how many it closed.
// A program calls it on its way out, from a SIGINT or SIGTERM handler
// for instance: unlike with the kernel's rdma_cm, nobody else tells the
// peers that this process is gone, and they would otherwise find out only
// through their keepalive. It is safe for concurrent use.
func DisconnectAll() int {
	agents.mu.Lock()
	as := make([]*agent, 0, len(agents.m))
	for _, a := range agents.m {
		as = append(as, a)
	}
	agents.mu.Unlock()
	var conns []*Conn
	for _, a := range as {
		a.mu.Lock()
		for _, id := range a.ids {
			if id.state == stateEstablished && id.conn != nil {
				conns = append(conns, id.conn)
			}
		}
		a.mu.Unlock()
	}
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}
