package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioAlign is the alignment O_DIRECT needs for buffers, offsets and lengths
// on every Linux filesystem we target (logical block size ≤ 4 KiB).
const ioAlign = 4096

// diskFileName holds every disk slot; one file per DiskDir.
const diskFileName = "kvgate-kvagent-blocks.dat"

// alignedBuffer returns n bytes (n rounded up to ioAlign) whose address is
// ioAlign-aligned, as O_DIRECT requires. Go heap objects do not move, so
// over-allocating and slicing is enough.
func alignedBuffer(n int) []byte {
	n = alignUp(n)
	b := make([]byte, n+ioAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) & (ioAlign - 1)); r != 0 {
		off = ioAlign - r
	}
	return b[off : off+n : off+n]
}

func alignUp(n int) int { return (n + ioAlign - 1) &^ (ioAlign - 1) }

func isAligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))&(ioAlign-1) == 0 && len(b)%ioAlign == 0
}

func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kvagent store: disk dir: %w", err)
	}
	return nil
}

// probeDirectIO reports whether dir's filesystem accepts O_DIRECT: it opens
// a scratch file with O_DIRECT and writes one aligned page (tmpfs refuses
// the open, some FUSE and overlay setups refuse the write, both with EINVAL).
func probeDirectIO(dir string) (bool, error) {
	path := filepath.Join(dir, fmt.Sprintf(".kvgate-directio-probe-%d", os.Getpid()))
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_DIRECT, 0o600)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) {
			return false, nil
		}
		return false, fmt.Errorf("probe O_DIRECT in %s: %w", dir, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(alignedBuffer(ioAlign), 0); err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) {
			return false, nil
		}
		return false, fmt.Errorf("probe O_DIRECT write in %s: %w", dir, err)
	}
	return true, nil
}

// diskFile is the disk tier's storage: a superblock page, then slots of
// slotBytes (header region + data, padded to ioAlign), pre-allocated so
// writes never extend the file (extending writes are slow under O_DIRECT
// and can fail with ENOSPC at the worst moment).
type diskFile struct {
	f          *os.File
	path       string
	direct     bool
	blockBytes int
	slotBytes  int64
	slots      int

	// writeChunk, when > 0, splits each slot write into pieces of this size
	// with chunkPause between them. Only the crash test sets it, to make a
	// kill -9 land inside a block write.
	writeChunk int
	chunkPause func()
}

const (
	superMagic   = "KVGDISK1"
	superVersion = 1
)

// openDiskFile opens (creating or re-initialising) the disk tier file. A
// file laid out for another block size is re-initialised: its slots cannot
// be read with this geometry. It returns the number of slots worth
// scanning (the slots that existed before, capped at slots).
func openDiskFile(dir string, blockBytes, slots int, direct bool) (*diskFile, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("disk dir: %w", err)
	}
	path := filepath.Join(dir, diskFileName)
	flags := os.O_RDWR | os.O_CREATE
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("open disk tier file: %w", err)
	}
	// Two agents sharing one file would overwrite each other's slots.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("disk tier file %s is locked by another process: %w", path, err)
	}
	d := &diskFile{f: f, path: path, direct: direct, blockBytes: blockBytes,
		slotBytes: int64(headerRegion + alignUp(blockBytes)), slots: slots}
	existing, err := d.readSuper()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if existing < 0 {
		// New file or other geometry: start empty.
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("truncate disk tier file: %w", err)
		}
		existing = 0
	}
	size := ioAlign + int64(slots)*d.slotBytes
	if existing > slots {
		existing = slots
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("shrink disk tier file: %w", err)
		}
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("pre-allocate %d bytes for the disk tier: %w", size, err)
	}
	if err := d.writeSuper(); err != nil {
		f.Close()
		return nil, 0, err
	}
	return d, existing, nil
}

func preallocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return f.Truncate(size)
	}
	return err
}

// readSuper returns the slot count of a compatible existing file, or -1
// when the file is new or laid out differently.
func (d *diskFile) readSuper() (int, error) {
	b := alignedBuffer(ioAlign)
	n, err := d.f.ReadAt(b, 0)
	if n < ioAlign {
		if err == nil || errors.Is(err, io.EOF) {
			return -1, nil
		}
		return 0, fmt.Errorf("read disk tier superblock: %w", err)
	}
	le := binary.LittleEndian
	if string(b[:8]) != superMagic || le.Uint32(b[8:]) != superVersion ||
		crc32.Checksum(b[:40], castagnoli) != le.Uint32(b[40:]) ||
		le.Uint64(b[16:]) != uint64(d.blockBytes) || le.Uint64(b[24:]) != uint64(d.slotBytes) {
		return -1, nil
	}
	slots := le.Uint64(b[32:])
	if slots > 1<<40 {
		return -1, nil
	}
	return int(slots), nil
}

func (d *diskFile) writeSuper() error {
	b := alignedBuffer(ioAlign)
	le := binary.LittleEndian
	copy(b, superMagic)
	le.PutUint32(b[8:], superVersion)
	le.PutUint64(b[16:], uint64(d.blockBytes))
	le.PutUint64(b[24:], uint64(d.slotBytes))
	le.PutUint64(b[32:], uint64(d.slots))
	le.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
	if _, err := d.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write disk tier superblock: %w", err)
	}
	return nil
}

func (d *diskFile) offset(slot int32) int64 { return ioAlign + int64(slot)*d.slotBytes }

// writeSlot writes a whole slot image (header region + padded data) with
// one positioned write; buf is aligned and slotBytes long.
func (d *diskFile) writeSlot(slot int32, buf []byte) error {
	off := d.offset(slot)
	if d.writeChunk <= 0 {
		_, err := d.f.WriteAt(buf, off)
		return err
	}
	for p := 0; p < len(buf); p += d.writeChunk {
		end := min(p+d.writeChunk, len(buf))
		if _, err := d.f.WriteAt(buf[p:end], off+int64(p)); err != nil {
			return err
		}
		if d.chunkPause != nil {
			d.chunkPause()
		}
	}
	return nil
}

// readSlot reads slot's header region into hdr and its data into dst
// (len BlockBytes) with one preadv: header page and data are contiguous on
// disk, so a slot costs one device request, not two. With O_DIRECT the
// data goes straight into dst when dst is aligned (arena slots of a
// page-multiple block size are), otherwise through the aligned scratch.
func (d *diskFile) readSlot(slot int32, hdr, dst, scratch []byte) error {
	data := dst
	if d.direct && !isAligned(dst) {
		data = scratch[:alignUp(d.blockBytes)]
	}
	want := headerRegion + len(data)
	n, err := unix.Preadv(int(d.f.Fd()), [][]byte{hdr[:headerRegion], data}, d.offset(slot))
	if err != nil {
		return fmt.Errorf("read slot %d: %w", slot, err)
	}
	if n != want {
		return fmt.Errorf("read slot %d: %d of %d bytes", slot, n, want)
	}
	if len(data) != len(dst) || &data[0] != &dst[0] {
		copy(dst, data)
	}
	return nil
}

func (d *diskFile) close() error { return d.f.Close() }
