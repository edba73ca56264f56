// This file is the bpf(2) system calls the group needs, over
// golang.org/x/sys/unix: maps (create, update, lookup, delete), loading a
// program, pinning and opening pinned objects.

package reuseport

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapCreateAttr is the BPF_MAP_CREATE part of union bpf_attr.
type mapCreateAttr struct {
	mapType    uint32
	keySize    uint32
	valueSize  uint32
	maxEntries uint32
	mapFlags   uint32
	innerFD    uint32
	numaNode   uint32
	name       [16]byte
}

// elemAttr is the BPF_MAP_*_ELEM part.
type elemAttr struct {
	mapFD uint32
	_     uint32
	key   uint64
	value uint64
	flags uint64
}

// progLoadAttr is the BPF_PROG_LOAD part, up to expected_attach_type.
type progLoadAttr struct {
	progType     uint32
	insnCnt      uint32
	insns        uint64
	license      uint64
	logLevel     uint32
	logSize      uint32
	logBuf       uint64
	kernVersion  uint32
	progFlags    uint32
	name         [16]byte
	ifindex      uint32
	expectedType uint32
}

// objAttr is the BPF_OBJ_PIN / BPF_OBJ_GET part.
type objAttr struct {
	pathname  uint64
	bpfFD     uint32
	fileFlags uint32
}

// Update flags of BPF_MAP_UPDATE_ELEM.
const (
	bpfAny     = 0
	bpfNoExist = 1

	// bpfNoPrealloc (BPF_F_NO_PREALLOC) makes a hash map allocate its
	// entries as they are added, not all at creation.
	bpfNoPrealloc = 1
)

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

func mapCreate(typ, keySize, valueSize, maxEntries, flags uint32, name string) (int, error) {
	a := mapCreateAttr{mapType: typ, keySize: keySize, valueSize: valueSize, maxEntries: maxEntries, mapFlags: flags}
	copy(a.name[:15], name)
	fd, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&a), unsafe.Sizeof(a))
	if err != nil {
		return -1, fmt.Errorf("creating BPF map %s: %w", name, err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

func mapUpdate(fd int, key uint32, value uint64, flags uint64) error {
	a := elemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&key))), value: uint64(uintptr(unsafe.Pointer(&value))), flags: flags}
	_, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(&key)
	runtime.KeepAlive(&value)
	return err
}

// mapLookup reads key's value into a uint64 (a socket array yields the
// socket's cookie; a 4-byte value lands in the low half on little-endian
// machines, so callers of 4-byte maps use mapLookup32).
func mapLookup(fd int, key uint32) (uint64, error) {
	var value uint64
	a := elemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&key))), value: uint64(uintptr(unsafe.Pointer(&value)))}
	_, err := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(&key)
	return value, err
}

func mapLookup32(fd int, key uint32) (uint32, error) {
	var value uint32
	a := elemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&key))), value: uint64(uintptr(unsafe.Pointer(&value)))}
	_, err := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(&key)
	return value, err
}

func mapUpdate32(fd int, key, value uint32, flags uint64) error {
	a := elemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&key))), value: uint64(uintptr(unsafe.Pointer(&value))), flags: flags}
	_, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(&key)
	runtime.KeepAlive(&value)
	return err
}

func mapDelete(fd int, key uint32) error {
	a := elemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&key)))}
	_, err := bpf(unix.BPF_MAP_DELETE_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(&key)
	return err
}

// progLoad loads an SK_REUSEPORT program; on a verifier error the
// verifier's log is in the error.
func progLoad(insns []insn, name string) (int, error) {
	license := []byte("GPL\x00") // sk_select_reuseport is not GPL-only; any string does
	log := make([]byte, 64<<10)
	a := progLoadAttr{
		progType:     unix.BPF_PROG_TYPE_SK_REUSEPORT,
		insnCnt:      uint32(len(insns)),
		insns:        uint64(uintptr(unsafe.Pointer(&insns[0]))),
		license:      uint64(uintptr(unsafe.Pointer(&license[0]))),
		logLevel:     1,
		logSize:      uint32(len(log)),
		logBuf:       uint64(uintptr(unsafe.Pointer(&log[0]))),
		expectedType: unix.BPF_SK_REUSEPORT_SELECT,
	}
	copy(a.name[:15], name)
	fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	if err != nil {
		n := 0
		for n < len(log) && log[n] != 0 {
			n++
		}
		if n > 0 {
			return -1, fmt.Errorf("loading the steering program: %w; verifier: %s", err, log[:n])
		}
		return -1, fmt.Errorf("loading the steering program: %w", err)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

func objPin(fd int, path string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	a := objAttr{pathname: uint64(uintptr(unsafe.Pointer(p))), bpfFD: uint32(fd)}
	_, err = bpf(unix.BPF_OBJ_PIN, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(p)
	return err
}

func objGet(path string) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	a := objAttr{pathname: uint64(uintptr(unsafe.Pointer(p)))}
	fd, err := bpf(unix.BPF_OBJ_GET, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(p)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// openOrCreate opens the map pinned at path, or creates one with create
// and pins it there. Two processes racing to create it both end with the
// one that was pinned first.
func openOrCreate(path string, create func() (int, error)) (int, error) {
	for range 3 {
		fd, err := objGet(path)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("opening %s: %w", path, err)
		}
		fd, err = create()
		if err != nil {
			return -1, err
		}
		err = objPin(fd, path)
		if err == nil {
			return fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("pinning %s: %w", path, err)
		}
	}
	return -1, fmt.Errorf("opening %s: it keeps appearing and vanishing", path)
}
