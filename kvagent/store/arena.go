package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// arena is the host tier's memory: a file in shared memory (tmpfs),
// mapped MAP_SHARED so an engine process that maps the same file sees the
// same bytes. Slot i is bytes [i*blockBytes, (i+1)*blockBytes).
type arena struct {
	path       string
	f          *os.File
	mem        []byte
	blockBytes int
}

// openArena creates (or truncates) path and maps it. The space is
// fallocated so that a node without enough memory fails here, at start,
// rather than with SIGBUS when a slot is first touched.
func openArena(path string, blockBytes, slots int) (*arena, error) {
	size := int64(blockBytes) * int64(slots)
	if size > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("host arena of %d bytes does not fit the address space", size)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("host arena dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host arena: %w", err)
	}
	fail := func(err error) (*arena, error) {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		return fail(fmt.Errorf("host arena: size %s to %d bytes: %w", path, size, err))
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
		return fail(fmt.Errorf("host arena: reserve %d bytes in %s: %w", size, path, err))
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("host arena: mmap %s: %w", path, err))
	}
	return &arena{path: path, f: f, mem: mem, blockBytes: blockBytes}, nil
}

func (a *arena) slot(i int32) []byte {
	off := int(i) * a.blockBytes
	return a.mem[off : off+a.blockBytes : off+a.blockBytes]
}

// close unmaps and removes the file: the host tier does not outlive the
// agent (engines that still map it keep their own mapping).
func (a *arena) close() error {
	err := syscall.Munmap(a.mem)
	a.mem = nil
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(a.path); err == nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}
