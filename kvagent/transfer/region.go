package transfer

import (
	"fmt"
	"math"
	"unsafe"
)

// region is a registered Region, resolved to what the data path needs.
type region struct {
	handle  uint32
	kind    MemKind
	mem     []byte // DRAM: exactly the registered bytes
	file    fileIO // FILE
	fileOff int64  // FILE: where the region starts in the file
	length  int64
}

// fileIO is the part of *os.File a FILE region uses.
type fileIO interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
}

// newRegion checks r and resolves it. VRAM is the nixl backend's business.
func newRegion(handle uint32, r Region) (*region, error) {
	switch r.Kind {
	case DRAM:
		if r.File != nil {
			return nil, fmt.Errorf("kvagent/transfer: DRAM region with a File")
		}
		if r.Offset < 0 || r.Offset > int64(len(r.Addr)) {
			return nil, fmt.Errorf("kvagent/transfer: DRAM region offset %d outside its %d-byte Addr", r.Offset, len(r.Addr))
		}
		n := r.Len
		if n == 0 {
			n = int64(len(r.Addr)) - r.Offset
		}
		if n <= 0 || n > int64(len(r.Addr))-r.Offset {
			return nil, fmt.Errorf("kvagent/transfer: DRAM region [%d, +%d) outside its %d-byte Addr", r.Offset, r.Len, len(r.Addr))
		}
		return &region{handle: handle, kind: DRAM, mem: r.Addr[r.Offset : r.Offset+n : r.Offset+n], length: n}, nil
	case FILE:
		if r.File == nil {
			return nil, fmt.Errorf("kvagent/transfer: FILE region without a File")
		}
		if r.Offset < 0 || r.Len <= 0 || r.Len > math.MaxInt64-r.Offset {
			return nil, fmt.Errorf("kvagent/transfer: FILE region [%d, +%d): want Offset >= 0 and Len > 0", r.Offset, r.Len)
		}
		return &region{handle: handle, kind: FILE, file: r.File, fileOff: r.Offset, length: r.Len}, nil
	case VRAM:
		return nil, fmt.Errorf("kvagent/transfer: VRAM region: %w (build with -tags nixl and use NewNIXL)", ErrUnsupported)
	}
	return nil, fmt.Errorf("kvagent/transfer: region kind %d: want DRAM or FILE", r.Kind)
}

// checkRange is the bounds check every descriptor passes, on both sides of
// a transfer, written so that no sum can overflow.
func checkRange(length, off, n int64) error {
	if n <= 0 {
		return fmt.Errorf("%w: length %d, want > 0", ErrOutOfBounds, n)
	}
	if off < 0 || off > length || n > length-off {
		return fmt.Errorf("%w: [%d, +%d) in a %d-byte region", ErrOutOfBounds, off, n, length)
	}
	return nil
}

// readAt copies len(p) bytes at off of the region into p.
func (r *region) readAt(p []byte, off int64) error {
	if r.kind == DRAM {
		copy(p, r.mem[off:])
		return nil
	}
	if _, err := r.file.ReadAt(p, r.fileOff+off); err != nil {
		return fmt.Errorf("kvagent/transfer: region %d: read %d bytes at %d: %w", r.handle, len(p), off, err)
	}
	return nil
}

// writeAt copies p into the region at off.
func (r *region) writeAt(p []byte, off int64) error {
	if r.kind == DRAM {
		copy(r.mem[off:], p)
		return nil
	}
	if _, err := r.file.WriteAt(p, r.fileOff+off); err != nil {
		return fmt.Errorf("kvagent/transfer: region %d: write %d bytes at %d: %w", r.handle, len(p), off, err)
	}
	return nil
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
