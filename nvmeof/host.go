package nvmeof

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/softrdma/softrdma/cm"
)

// HostConfig configures a host's controllers. Zero fields take the
// defaults named.
type HostConfig struct {
	// HostNQN names this host (default: a random
	// nqn.2014-08.org.nvmexpress:uuid:… per process).
	HostNQN string
	// HostID is the host identifier (default: random per process).
	HostID [16]byte
	// IOQueues is how many I/O queues to ask for (default 1); the
	// controller may grant fewer.
	IOQueues int
	// QueueSize is the entries of each I/O queue: the most commands in
	// flight on it (default 32; the admin queue has 32).
	QueueSize int
	// KeepAlive is the keep-alive timeout (KATO) the controller enforces;
	// the host sends Keep Alive at half of it (default 5 s; negative: none).
	KeepAlive time.Duration
	// ReconnectDelay is the wait between attempts to reconnect a lost
	// controller (default 1 s); ControllerLossTimeout ends the attempts
	// (default 60 s; negative: do not reconnect).
	ReconnectDelay, ControllerLossTimeout time.Duration
	// CM are the connection options for every queue (the device: Context).
	CM *cm.Options
}

var (
	defaultHostOnce sync.Once
	defaultHostNQN  string
	defaultHostID   [16]byte
)

func (c *HostConfig) withDefaults() (HostConfig, error) {
	var d HostConfig
	if c != nil {
		d = *c
	}
	defaultHostOnce.Do(func() {
		rand.Read(defaultHostID[:])
		defaultHostID[6] = defaultHostID[6]&0x0f | 0x40
		defaultHostID[8] = defaultHostID[8]&0x3f | 0x80
		u := defaultHostID
		defaultHostNQN = fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	})
	if d.HostNQN == "" {
		d.HostNQN, d.HostID = defaultHostNQN, defaultHostID
	}
	if d.IOQueues == 0 {
		d.IOQueues = 1
	}
	if d.QueueSize == 0 {
		d.QueueSize = 32
	}
	if d.KeepAlive == 0 {
		d.KeepAlive = 5 * time.Second
	}
	if d.ReconnectDelay == 0 {
		d.ReconnectDelay = time.Second
	}
	if d.ControllerLossTimeout == 0 {
		d.ControllerLossTimeout = 60 * time.Second
	}
	switch {
	case len(d.HostNQN) > 223:
		return d, fmt.Errorf("nvmeof: a host NQN of %d bytes; at most 223", len(d.HostNQN))
	case d.IOQueues < 1 || d.IOQueues > 256:
		return d, fmt.Errorf("nvmeof: IOQueues %d: use 1 to 256", d.IOQueues)
	case d.QueueSize < 2 || d.QueueSize > 1024:
		return d, fmt.Errorf("nvmeof: QueueSize %d: use 2 to 1024", d.QueueSize)
	}
	return d, nil
}

// ErrControllerLost is returned by I/O on a controller whose connection
// is gone and could not be made again within ControllerLossTimeout (or
// after Close).
var ErrControllerLost = errors.New("nvmeof: the controller is gone")

const adminQueueSize = 32

// Controller is a host's connection to an NVMe-oF controller: an admin
// queue and I/O queues. Its methods are safe for concurrent use: I/O from
// several goroutines runs at the queues' depth.
type Controller struct {
	cfg     HostConfig
	address string
	subNQN  string

	mu        sync.Mutex
	ready     chan struct{} // closed while connected, and when closed or lost
	woken     bool          // ready is closed
	admin     *hostQueue
	io        []*hostQueue
	next      int
	info      ControllerInfo
	cntlid    uint16
	closed    bool
	lost      error
	stop      chan struct{}
	stopKA    chan struct{}
	maxXfer   int
	reconnect sync.WaitGroup
}

// Connect connects to subsystem subNQN at address (IP:port; the NVMe-oF
// RDMA port is 4420): the admin queue, the controller's enable, Identify,
// the number of queues, then the I/O queues.
func Connect(ctx context.Context, address, subNQN string, cfg *HostConfig) (*Controller, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{cfg: c, address: address, subNQN: subNQN, stop: make(chan struct{})}
	if err := ctrl.connect(ctx); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Discover reads the discovery log page of the discovery controller at
// address.
func Discover(ctx context.Context, address string, cfg *HostConfig) ([]DiscoveryEntry, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c.KeepAlive, c.ControllerLossTimeout = -1, -1
	ctrl := &Controller{cfg: c, address: address, subNQN: DiscoveryNQN, stop: make(chan struct{})}
	if err := ctrl.connect(ctx); err != nil {
		return nil, err
	}
	defer ctrl.Close()
	// The header first, for the number of records; then all of them.
	head := make([]byte, discoveryHeaderLen)
	if err := ctrl.getLogPage(ctx, LogDiscovery, 0, head); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(head[8:])
	if n > 1024 {
		return nil, fmt.Errorf("nvmeof: the discovery log claims %d records", n)
	}
	page := make([]byte, discoveryHeaderLen+int(n)*discoveryEntryLen)
	for off := 0; off < len(page); off += ctrl.maxXfer {
		if err := ctrl.getLogPage(ctx, LogDiscovery, uint64(off), page[off:min(len(page), off+ctrl.maxXfer)]); err != nil {
			return nil, err
		}
	}
	_, entries, err := parseDiscoveryLog(page)
	return entries, err
}

func (c *Controller) connect(ctx context.Context) (err error) {
	admin, err := c.dialQueue(ctx, 0, adminQueueSize, 0xffff)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			admin.close()
		}
	}()
	c.cntlid = admin.cntlid
	// Enable the controller: CC with EN, 64-byte SQ and 16-byte CQ entries,
	// then wait for CSTS.RDY.
	if _, err := admin.property(ctx, false, propCC, 1|6<<16|4<<20); err != nil {
		return fmt.Errorf("nvmeof: enabling the controller: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		csts, err := admin.property(ctx, true, propCSTS, 0)
		if err != nil {
			return fmt.Errorf("nvmeof: reading CSTS: %w", err)
		}
		if csts&cstsReady != 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("nvmeof: the controller did not become ready in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, identifyDataBytes)
	if _, err := admin.exec(ctx, func(cmd Command) { cmd.setHeader(AdminIdentify, 0, 0); cmd.setCDW(10, cnsController) }, nil, buf); err != nil {
		return fmt.Errorf("nvmeof: identify controller: %w", err)
	}
	info, err := parseControllerInfo(buf)
	if err != nil {
		return err
	}
	if info.SGLS&sglsKeyed == 0 {
		return errors.New("nvmeof: the controller does not support keyed SGLs, which RDMA needs")
	}
	maxXfer := min(info.MaxTransferSize, 1<<20)
	if maxXfer == 0 {
		maxXfer = 1 << 20
	}
	c.mu.Lock()
	c.info, c.maxXfer = info, maxXfer
	c.mu.Unlock()
	var ios []*hostQueue
	if c.subNQN != DiscoveryNQN {
		n := c.cfg.IOQueues
		res, err := admin.exec(ctx, func(cmd Command) {
			cmd.setHeader(AdminSetFeatures, 0, 0)
			cmd.setCDW(10, FeatNumQueues)
			cmd.setCDW(11, uint32(n-1)|uint32(n-1)<<16)
		}, nil, nil)
		if err != nil {
			return fmt.Errorf("nvmeof: set number of queues: %w", err)
		}
		n = min(n, int(res&0xffff)+1, int(res>>16&0xffff)+1)
		size := min(c.cfg.QueueSize, int(info.MaxCmd))
		if size < 2 {
			size = 2
		}
		for i := 1; i <= n; i++ {
			q, err := c.dialQueue(ctx, uint16(i), size, c.cntlid)
			if err != nil {
				for _, q := range ios {
					q.close()
				}
				return err
			}
			ios = append(ios, q)
		}
	}
	c.mu.Lock()
	c.admin, c.io = admin, ios
	c.wakeLocked() // the callers that waited for the reconnect
	c.stopKA = make(chan struct{})
	c.mu.Unlock()
	if c.cfg.KeepAlive > 0 {
		go c.keepAlive(admin, c.stopKA)
	}
	for _, q := range append([]*hostQueue{admin}, ios...) {
		go c.watch(q)
	}
	return nil
}

func (c *Controller) wakeLocked() {
	if c.ready == nil {
		c.ready = make(chan struct{})
	}
	if !c.woken {
		close(c.ready)
		c.woken = true
	}
}

// Info returns the controller's Identify Controller data.
func (c *Controller) Info() ControllerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// keepAlive sends Keep Alive at half the keep-alive timeout.
func (c *Controller) keepAlive(admin *hostQueue, stop chan struct{}) {
	t := time.NewTicker(c.cfg.KeepAlive / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.KeepAlive)
			admin.exec(ctx, func(cmd Command) { cmd.setHeader(AdminKeepAlive, 0, 0) }, nil, nil)
			cancel()
		}
	}
}

// watch turns a queue's end into the controller's loss: every queue is
// closed and, unless the host closed it, a reconnect starts.
func (c *Controller) watch(q *hostQueue) {
	select {
	case <-q.conn.Done():
	case <-q.dead:
	}
	c.mu.Lock()
	if c.closed || c.admin == nil || q.gen != c.admin.gen {
		c.mu.Unlock()
		return
	}
	c.ready, c.woken = make(chan struct{}), false
	qs := append([]*hostQueue{c.admin}, c.io...)
	c.admin, c.io = nil, nil
	close(c.stopKA)
	c.reconnect.Add(1)
	c.mu.Unlock()
	for _, q := range qs {
		q.close()
	}
	go c.reconnectLoop()
}

func (c *Controller) reconnectLoop() {
	defer c.reconnect.Done()
	give := time.Now().Add(c.cfg.ControllerLossTimeout)
	for c.cfg.ControllerLossTimeout > 0 && time.Now().Before(give) {
		select {
		case <-c.stop:
			return
		case <-time.After(c.cfg.ReconnectDelay):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.connect(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	c.mu.Lock()
	c.lost = ErrControllerLost
	c.wakeLocked() // the waiters find lost set
	c.mu.Unlock()
}

// Close disconnects every queue.
func (c *Controller) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.wakeLocked()
	close(c.stop)
	qs := append([]*hostQueue{}, c.io...)
	if c.admin != nil {
		qs = append(qs, c.admin)
		close(c.stopKA)
	}
	c.admin, c.io = nil, nil
	c.mu.Unlock()
	c.reconnect.Wait()
	for _, q := range qs {
		q.close()
	}
	return nil
}

// queueFor returns an I/O queue (round robin), waiting while the
// controller reconnects.
func (c *Controller) queueFor(ctx context.Context, admin bool) (*hostQueue, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrControllerLost
		}
		if c.lost != nil {
			err := c.lost
			c.mu.Unlock()
			return nil, err
		}
		ready := c.ready
		if c.admin != nil {
			var q *hostQueue
			if admin || len(c.io) == 0 {
				q = c.admin
			} else {
				q = c.io[c.next%len(c.io)]
				c.next++
			}
			c.mu.Unlock()
			return q, nil
		}
		c.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// submit runs a command, retrying on a new connection if the queue died
// under it (block commands are idempotent).
func (c *Controller) submit(ctx context.Context, admin bool, build func(Command), in, out []byte) (uint64, error) {
	for {
		q, err := c.queueFor(ctx, admin)
		if err != nil {
			return 0, err
		}
		res, err := q.exec(ctx, build, in, out)
		if errors.Is(err, errQueueGone) {
			continue
		}
		return res, err
	}
}

func (c *Controller) getLogPage(ctx context.Context, lid uint8, off uint64, out []byte) error {
	numd := uint32(len(out)/4 - 1)
	_, err := c.submit(ctx, true, func(cmd Command) {
		cmd.setHeader(AdminGetLogPage, 0, 0xffffffff)
		cmd.setCDW(10, uint32(lid)|numd<<16)
		cmd.setCDW(11, numd>>16)
		cmd.setCDW(12, uint32(off))
		cmd.setCDW(13, uint32(off>>32))
	}, nil, out)
	return err
}

// IdentifyNamespace returns namespace nsid's size and block size.
func (c *Controller) IdentifyNamespace(ctx context.Context, nsid uint32) (NamespaceInfo, error) {
	buf := make([]byte, identifyDataBytes)
	if _, err := c.submit(ctx, true, func(cmd Command) { cmd.setHeader(AdminIdentify, 0, nsid); cmd.setCDW(10, cnsNamespace) }, nil, buf); err != nil {
		return NamespaceInfo{}, err
	}
	return parseNamespaceInfo(buf)
}

// Namespaces lists the active namespace IDs.
func (c *Controller) Namespaces(ctx context.Context) ([]uint32, error) {
	buf := make([]byte, identifyDataBytes)
	if _, err := c.submit(ctx, true, func(cmd Command) { cmd.setHeader(AdminIdentify, 0, 0); cmd.setCDW(10, cnsActiveNSList) }, nil, buf); err != nil {
		return nil, err
	}
	var ids []uint32
	for i := 0; i < len(buf); i += 4 {
		id := binary.LittleEndian.Uint32(buf[i:])
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Read reads len(p)/blockSize blocks of namespace nsid from lba into p;
// len(p) must be a multiple of the namespace's block size, at most the
// controller's maximum transfer (MaxTransfer).
func (c *Controller) Read(ctx context.Context, nsid uint32, lba uint64, p []byte, blockSize int) error {
	return c.rw(ctx, IORead, nsid, lba, p, blockSize)
}

// Write writes p to namespace nsid at lba, as Read.
func (c *Controller) Write(ctx context.Context, nsid uint32, lba uint64, p []byte, blockSize int) error {
	return c.rw(ctx, IOWrite, nsid, lba, p, blockSize)
}

// MaxTransfer is the most bytes one Read or Write moves.
func (c *Controller) MaxTransfer() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxXfer
}

func (c *Controller) rw(ctx context.Context, op uint8, nsid uint32, lba uint64, p []byte, bs int) error {
	if bs <= 0 || len(p) == 0 || len(p)%bs != 0 || len(p)/bs > 1<<16 {
		return fmt.Errorf("nvmeof: %d bytes is not 1 to 65536 blocks of %d bytes", len(p), bs)
	}
	if len(p) > c.MaxTransfer() {
		return fmt.Errorf("nvmeof: %d bytes in one command; the controller moves at most %d (MaxTransfer)", len(p), c.MaxTransfer())
	}
	nlb := uint32(len(p)/bs - 1)
	build := func(cmd Command) {
		cmd.setHeader(op, 0, nsid)
		binary.LittleEndian.PutUint64(cmd[40:], lba)
		cmd.setCDW(12, nlb)
	}
	var err error
	if op == IOWrite {
		_, err = c.submit(ctx, false, build, p, nil)
	} else {
		_, err = c.submit(ctx, false, build, nil, p)
	}
	return err
}

// Flush makes the namespace's written data durable.
func (c *Controller) Flush(ctx context.Context, nsid uint32) error {
	_, err := c.submit(ctx, false, func(cmd Command) { cmd.setHeader(IOFlush, 0, nsid) }, nil, nil)
	return err
}

// WriteZeroes zeroes blocks (1 to 65536) at lba.
func (c *Controller) WriteZeroes(ctx context.Context, nsid uint32, lba uint64, blocks int) error {
	if blocks < 1 || blocks > 1<<16 {
		return fmt.Errorf("nvmeof: WriteZeroes of %d blocks; use 1 to 65536", blocks)
	}
	_, err := c.submit(ctx, false, func(cmd Command) {
		cmd.setHeader(IOWriteZeroes, 0, nsid)
		binary.LittleEndian.PutUint64(cmd[40:], lba)
		cmd.setCDW(12, uint32(blocks-1))
	}, nil, nil)
	return err
}

// Exec runs a raw command on the admin queue (admin) or an I/O queue; in
// is data for the controller, out a buffer for its data. It returns the
// completion's result (DW0-1), or the status as a Status error.
func (c *Controller) Exec(ctx context.Context, admin bool, cmd [CommandSize]byte, in, out []byte) (uint64, error) {
	return c.submit(ctx, admin, func(b Command) { copy(b, cmd[:]) }, in, out)
}
