package nvmeof

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Store is the backing store of a namespace: a file, a block device or
// memory. ReadAt and WriteAt are called from several queues at once, as
// io.ReaderAt and io.WriterAt allow; offsets and lengths are always whole
// blocks inside Size.
type Store interface {
	io.ReaderAt
	io.WriterAt
	// Size is the store's size in bytes.
	Size() int64
}

// A Store that implements Syncer makes Flush commands durable; without it
// Flush succeeds at once (memory has no cache to flush).
type Syncer interface{ Sync() error }

// A Store that implements Zeroer serves Write Zeroes without writing
// buffers of zeros; a Discarder serves Dataset Management's deallocate.
type (
	Zeroer    interface{ WriteZeroes(off, n int64) error }
	Discarder interface{ Discard(off, n int64) error }
)

// MemoryStore is a Store in memory, safe for concurrent use.
type MemoryStore struct {
	mu  sync.RWMutex
	buf []byte
}

// NewMemoryStore returns size bytes of zeroed memory as a Store.
func NewMemoryStore(size int64) *MemoryStore { return &MemoryStore{buf: make([]byte, size)} }

func (m *MemoryStore) Size() int64 { return int64(len(m.buf)) }

func (m *MemoryStore) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off < 0 || off > int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *MemoryStore) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("nvmeof: write of %d bytes at %d beyond a %d-byte store", len(p), off, len(m.buf))
	}
	return copy(m.buf[off:], p), nil
}

// WriteZeroes zeroes n bytes at off.
func (m *MemoryStore) WriteZeroes(off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+n > int64(len(m.buf)) {
		return fmt.Errorf("nvmeof: zeroing %d bytes at %d beyond a %d-byte store", n, off, len(m.buf))
	}
	clear(m.buf[off : off+n])
	return nil
}

// Discard deallocates, which for memory reads back as zeros.
func (m *MemoryStore) Discard(off, n int64) error { return m.WriteZeroes(off, n) }

// FileStore is a Store on a regular file or a block device.
type FileStore struct {
	f    *os.File
	size int64
}

// OpenFileStore opens path (a regular file or a block device) read-write.
// A regular file's size is its length; it must be a multiple of the block
// size the namespace uses.
func OpenFileStore(path string) (*FileStore, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd) // works for block devices, whose Stat size is 0
	if err != nil {
		f.Close()
		return nil, err
	}
	if size == 0 {
		f.Close()
		return nil, fmt.Errorf("nvmeof: %s is empty; a namespace needs at least one block (truncate -s 1G %s)", path, path)
	}
	return &FileStore{f: f, size: size}, nil
}

func (s *FileStore) Size() int64                              { return s.size }
func (s *FileStore) ReadAt(p []byte, off int64) (int, error)  { return s.f.ReadAt(p, off) }
func (s *FileStore) WriteAt(p []byte, off int64) (int, error) { return s.f.WriteAt(p, off) }
func (s *FileStore) Sync() error                              { return s.f.Sync() }
func (s *FileStore) Close() error                             { return s.f.Close() }

// WriteZeroes punches no holes: it asks the file system to zero the range
// (FALLOC_FL_ZERO_RANGE), and writes zeros where it cannot.
func (s *FileStore) WriteZeroes(off, n int64) error {
	if err := fallocZero(s.f, off, n); err == nil {
		return nil
	}
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(zero)))
		if _, err := s.f.WriteAt(zero[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// Discard deallocates the range (FALLOC_FL_PUNCH_HOLE); a file system that
// cannot is not an error, as deallocation is advisory.
func (s *FileStore) Discard(off, n int64) error {
	if err := fallocPunch(s.f, off, n); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}
