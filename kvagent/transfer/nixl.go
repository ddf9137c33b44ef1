//go:build nixl

package transfer

// The NIXL backend: the same Endpoint over NVIDIA's NIXL (github.com/ai-dynamo/nixl)
// through cgo and the extern "C" shim in nixl_shim.cpp. It builds only
// with -tags nixl where libnixl and its headers are installed:
//
//	CGO_CXXFLAGS="-I$NIXL_PREFIX/include" CGO_LDFLAGS="-L$NIXL_PREFIX/lib/x86_64-linux-gnu" \
//	    go build -tags nixl ./...
//
// (NIXL_PREFIX defaults to /opt/nvidia/nvda_nixl, whose paths are built
// in.) Without the tag nothing here is compiled and nothing needs NIXL.

/*
#cgo CXXFLAGS: -std=c++17 -I/opt/nvidia/nvda_nixl/include
#cgo LDFLAGS: -L/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu -L/opt/nvidia/nvda_nixl/lib64 -L/opt/nvidia/nvda_nixl/lib -lnixl -lnixl_build -lnixl_common -lstdc++
#include <stdlib.h>
#include "nixl_shim.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// NIXLConfig configures the NIXL backend.
type NIXLConfig struct {
	// Name identifies the agent to its peers.
	Name string
	// Backend is the NIXL plugin that moves the bytes (default "UCX").
	Backend string
	// BackendParams override the plugin's default init parameters.
	BackendParams map[string]string
	// Registerer receives the transfer metrics (nil: none).
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// nixl_mem_t and nixl_xfer_op_t values (nixl_types.h).
const (
	nixlDRAM  = 0 // DRAM_SEG
	nixlVRAM  = 1 // VRAM_SEG
	nixlRead  = 0 // NIXL_READ
	nixlWrite = 1 // NIXL_WRITE

	nixlInProgress = 1
	nixlSuccess    = 0
)

type nixlEndpoint struct {
	cfg     NIXLConfig
	h       *C.kvg_nixl
	metrics *metrics
	log     *slog.Logger

	mu      sync.Mutex
	closed  bool
	regions map[uint32]*nixlRegion
	next    uint32
	peers   map[string]map[uint32]nixlRemoteRegion
	xfers   map[Xfer]*nixlXfer
	nextX   Xfer
}

// nixlRegion is a registration. A FILE region is mapped into memory and
// registered as DRAM: NIXL's network backends move memory, and FILE_SEG
// is for its local storage plugins.
type nixlRegion struct {
	handle uint32
	kind   MemKind // what the caller registered
	mem    int     // nixl_mem_t registered
	addr   uintptr
	length int64
	dev    uint64
	keep   []byte // DRAM: keeps the Go memory reachable while registered
	mapped []byte // FILE: the mapping to unmap
}

type nixlRemoteRegion struct {
	kind   MemKind
	mem    int
	addr   uint64
	length int64
	dev    uint64
}

type nixlXfer struct {
	req      unsafe.Pointer
	op       Op
	bytes    int64
	locals   []*nixlRegion
	posted   bool
	counted  bool // the finished state went into the metrics
	finalErr error
}

// NewNIXL creates a NIXL agent with one backend plugin.
func NewNIXL(cfg NIXLConfig) (Endpoint, error) {
	if cfg.Name == "" || len(cfg.Name) > maxNameLen {
		return nil, fmt.Errorf("kvagent/transfer: nixl: name %q: want 1..%d bytes", cfg.Name, maxNameLen)
	}
	if cfg.Backend == "" {
		cfg.Backend = "UCX"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	name, backend := C.CString(cfg.Name), C.CString(cfg.Backend)
	defer C.free(unsafe.Pointer(name))
	defer C.free(unsafe.Pointer(backend))
	var keys, vals []*C.char
	for k, v := range cfg.BackendParams {
		keys, vals = append(keys, C.CString(k)), append(vals, C.CString(v))
	}
	defer func() {
		for i := range keys {
			C.free(unsafe.Pointer(keys[i]))
			C.free(unsafe.Pointer(vals[i]))
		}
	}()
	var kp, vp **C.char
	if len(keys) > 0 {
		// C-allocated arrays: cgo forbids passing Go memory that holds
		// C pointers... which these would be in a Go slice.
		kp = (**C.char)(C.malloc(C.size_t(len(keys)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		vp = (**C.char)(C.malloc(C.size_t(len(keys)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		defer C.free(unsafe.Pointer(kp))
		defer C.free(unsafe.Pointer(vp))
		copy(unsafe.Slice(kp, len(keys)), keys)
		copy(unsafe.Slice(vp, len(vals)), vals)
	}
	var h *C.kvg_nixl
	var cerr *C.char
	if st := C.kvg_nixl_new(name, backend, kp, vp, C.int(len(keys)), &h, &cerr); st != nixlSuccess {
		msg := nixlStatus(st)
		if cerr != nil {
			msg = C.GoString(cerr)
			C.free(unsafe.Pointer(cerr))
		}
		return nil, fmt.Errorf("kvagent/transfer: nixl: create agent %q with backend %s: %s", cfg.Name, cfg.Backend, msg)
	}
	return &nixlEndpoint{cfg: cfg, h: h, metrics: m, log: cfg.Logger.With("agent", cfg.Name),
		regions: map[uint32]*nixlRegion{}, peers: map[string]map[uint32]nixlRemoteRegion{}, xfers: map[Xfer]*nixlXfer{}}, nil
}

func nixlStatus(st C.int) string {
	var buf [64]C.char
	C.kvg_nixl_status_str(st, &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}

func nixlErr(what string, st C.int) error {
	return fmt.Errorf("kvagent/transfer: nixl: %s: %s", what, nixlStatus(st))
}

func (a *nixlEndpoint) Name() string { return a.cfg.Name }

func (a *nixlEndpoint) RegisterMem(r Region) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	h := a.next + 1
	for h == 0 || a.regions[h] != nil {
		h++
	}
	reg := &nixlRegion{handle: h, kind: r.Kind}
	switch r.Kind {
	case DRAM:
		d, err := newRegion(h, r)
		if err != nil {
			return 0, err
		}
		reg.mem, reg.keep, reg.length = nixlDRAM, d.mem, d.length
		reg.addr = uintptrOf(d.mem)
	case VRAM:
		if r.DevPtr == 0 || r.Len <= 0 {
			return 0, fmt.Errorf("kvagent/transfer: VRAM region needs DevPtr and Len > 0")
		}
		reg.mem, reg.addr, reg.length, reg.dev = nixlVRAM, r.DevPtr, r.Len, uint64(r.DevID)
	case FILE:
		if _, err := newRegion(h, r); err != nil {
			return 0, err
		}
		mapped, addr, err := mapFileRegion(r.File, r.Offset, r.Len)
		if err != nil {
			return 0, err
		}
		reg.mem, reg.mapped, reg.addr, reg.length = nixlDRAM, mapped, addr, r.Len
	default:
		return 0, fmt.Errorf("kvagent/transfer: region kind %d: want DRAM, VRAM or FILE", r.Kind)
	}
	if st := C.kvg_nixl_register(a.h, C.int(reg.mem), C.uintptr_t(reg.addr), C.size_t(reg.length), C.uint64_t(reg.dev), 0); st != nixlSuccess {
		unmap(reg)
		return 0, nixlErr(fmt.Sprintf("register %s region of %d bytes", r.Kind, reg.length), st)
	}
	a.next = h
	a.regions[h] = reg
	return h, nil
}

// mapFileRegion maps [off, off+n) of f shared and writable; the mapping
// starts on a page boundary, the returned address at off.
func mapFileRegion(f *os.File, off, n int64) ([]byte, uintptr, error) {
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	m, err := syscall.Mmap(int(f.Fd()), start, int(off-start+n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("kvagent/transfer: nixl: map FILE region [%d, +%d) of %s (opened read-write?): %w", off, n, f.Name(), err)
	}
	return m, uintptrOf(m) + uintptr(off-start), nil
}

func unmap(r *nixlRegion) {
	if r.mapped != nil {
		syscall.Munmap(r.mapped)
		r.mapped = nil
	}
}

func (a *nixlEndpoint) DeregisterMem(handle uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.regions[handle]
	if r == nil {
		return fmt.Errorf("kvagent/transfer: deregister region %d: %w", handle, ErrUnknownRegion)
	}
	delete(a.regions, handle)
	st := C.kvg_nixl_register(a.h, C.int(r.mem), C.uintptr_t(r.addr), C.size_t(r.length), C.uint64_t(r.dev), 1)
	unmap(r)
	if st != nixlSuccess {
		return nixlErr(fmt.Sprintf("deregister region %d", handle), st)
	}
	return nil
}

// The NIXL backend's metadata wraps NIXL's own blob (getLocalMD) with the
// region table that turns (handle, offset) descriptors into the remote
// addresses NIXL transfers name:
//
//	magic "KVGN", version u8, name len u8, name, region count u32,
//	per region handle u32, kind u8, nixl mem u8, addr u64, len u64, dev u64,
//	NIXL blob len u32, blob, crc32c u32
const nixlMetadataMagic = "KVGN"

func (a *nixlEndpoint) LocalMetadata() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	var data unsafe.Pointer
	var n C.size_t
	if st := C.kvg_nixl_local_md(a.h, &data, &n); st != nixlSuccess {
		return nil, nixlErr("getLocalMD", st)
	}
	blob := C.GoBytes(data, C.int(n))
	C.free(data)
	handles := make([]uint32, 0, len(a.regions))
	for h := range a.regions {
		handles = append(handles, h)
	}
	sort.Slice(handles, func(i, j int) bool { return handles[i] < handles[j] })
	b := append([]byte(nixlMetadataMagic), 1, byte(len(a.cfg.Name)))
	b = append(b, a.cfg.Name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(handles)))
	for _, h := range handles {
		r := a.regions[h]
		b = binary.BigEndian.AppendUint32(b, h)
		b = append(b, byte(r.kind), byte(r.mem))
		b = binary.BigEndian.AppendUint64(b, uint64(r.addr))
		b = binary.BigEndian.AppendUint64(b, uint64(r.length))
		b = binary.BigEndian.AppendUint64(b, r.dev)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(blob)))
	b = append(b, blob...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func (a *nixlEndpoint) LoadRemoteMetadata(md []byte) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", metadataErr(format, args...)
	}
	if len(md) < 4+2+4+4+4 || string(md[:4]) != nixlMetadataMagic || md[4] != 1 {
		return bad("not NIXL-backend metadata (magic %q, %d bytes)", md[:min(4, len(md))], len(md))
	}
	body := md[:len(md)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(md[len(md)-4:]) {
		return bad("checksum mismatch")
	}
	p := body[5:]
	name, p, err := lenString(p, "name")
	if err != nil || name == "" {
		return bad("agent name")
	}
	if len(p) < 4 {
		return bad("agent %q: truncated", name)
	}
	count := binary.BigEndian.Uint32(p)
	p = p[4:]
	const entry = 4 + 1 + 1 + 8 + 8 + 8
	if count > maxRegions || int(count)*entry > len(p)-4 {
		return bad("agent %q: %d regions in %d bytes", name, count, len(p))
	}
	regions := make(map[uint32]nixlRemoteRegion, count)
	for i := 0; i < int(count); i++ {
		e := p[i*entry:]
		r := nixlRemoteRegion{kind: MemKind(e[4]), mem: int(e[5]), addr: binary.BigEndian.Uint64(e[6:]), length: int64(binary.BigEndian.Uint64(e[14:])), dev: binary.BigEndian.Uint64(e[22:])}
		if r.length <= 0 {
			return bad("agent %q: region %d: length %d", name, binary.BigEndian.Uint32(e), r.length)
		}
		regions[binary.BigEndian.Uint32(e)] = r
	}
	p = p[int(count)*entry:]
	blobLen := binary.BigEndian.Uint32(p)
	if int64(blobLen) != int64(len(p)-4) {
		return bad("agent %q: NIXL blob of %d bytes in %d", name, blobLen, len(p)-4)
	}
	blob := p[4:]
	var cname *C.char
	var st C.int
	if len(blob) == 0 {
		return bad("agent %q: empty NIXL blob", name)
	}
	st = C.kvg_nixl_load_md(a.h, unsafe.Pointer(&blob[0]), C.size_t(len(blob)), &cname)
	if st != nixlSuccess {
		return "", nixlErr(fmt.Sprintf("loadRemoteMD of %q", name), st)
	}
	got := C.GoString(cname)
	C.free(unsafe.Pointer(cname))
	if got != name {
		return bad("NIXL blob names agent %q, the envelope %q", got, name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return "", ErrClosed
	}
	a.peers[name] = regions
	return name, nil
}

func (a *nixlEndpoint) InvalidateRemote(remote string) error {
	a.mu.Lock()
	_, ok := a.peers[remote]
	delete(a.peers, remote)
	a.mu.Unlock()
	if !ok {
		return fmt.Errorf("kvagent/transfer: invalidate: %w %q", ErrUnknownRemote, remote)
	}
	cs := C.CString(remote)
	defer C.free(unsafe.Pointer(cs))
	if st := C.kvg_nixl_invalidate(a.h, cs); st != nixlSuccess {
		return nixlErr(fmt.Sprintf("invalidateRemoteMD(%q)", remote), st)
	}
	return nil
}

func (a *nixlEndpoint) CreateXfer(op Op, local []Desc, remote string, remoteDescs []Desc, notif []byte) (Xfer, error) {
	if op != Read && op != Write {
		return 0, fmt.Errorf("kvagent/transfer: create: op %d: want Read or Write", op)
	}
	if len(local) == 0 || len(local) != len(remoteDescs) || len(local) > maxDescs {
		return 0, fmt.Errorf("kvagent/transfer: create: %d local and %d remote descriptors: want the same number, 1..%d", len(local), len(remoteDescs), maxDescs)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	peer, ok := a.peers[remote]
	if !ok {
		return 0, fmt.Errorf("kvagent/transfer: create: %w %q (load its metadata first)", ErrUnknownRemote, remote)
	}
	n := len(local)
	laddr, llen, ldev := make([]C.uintptr_t, n), make([]C.size_t, n), make([]C.uint64_t, n)
	raddr, rlen, rdev := make([]C.uintptr_t, n), make([]C.size_t, n), make([]C.uint64_t, n)
	x := &nixlXfer{op: op, locals: make([]*nixlRegion, n)}
	lmem, rmem := -1, -1
	for i, d := range local {
		r := a.regions[d.Region]
		if r == nil {
			return 0, fmt.Errorf("kvagent/transfer: create: local descriptor %d: %w %d", i, ErrUnknownRegion, d.Region)
		}
		if err := checkRange(r.length, d.Offset, d.Len); err != nil {
			return 0, fmt.Errorf("kvagent/transfer: create: local descriptor %d (region %d): %w", i, d.Region, err)
		}
		rd := remoteDescs[i]
		if rd.Len != d.Len {
			return 0, fmt.Errorf("kvagent/transfer: create: descriptor %d: local length %d, remote length %d", i, d.Len, rd.Len)
		}
		rr, ok := peer[rd.Region]
		if !ok {
			return 0, fmt.Errorf("kvagent/transfer: create: remote descriptor %d: %w %d in %q's metadata", i, ErrUnknownRegion, rd.Region, remote)
		}
		if err := checkRange(rr.length, rd.Offset, rd.Len); err != nil {
			return 0, fmt.Errorf("kvagent/transfer: create: remote descriptor %d (%q region %d): %w", i, remote, rd.Region, err)
		}
		// One NIXL descriptor list holds one memory type.
		if lmem >= 0 && lmem != r.mem || rmem >= 0 && rmem != rr.mem {
			return 0, fmt.Errorf("kvagent/transfer: create: descriptor %d mixes memory types in one request: %w", i, ErrUnsupported)
		}
		lmem, rmem = r.mem, rr.mem
		laddr[i], llen[i], ldev[i] = C.uintptr_t(r.addr+uintptr(d.Offset)), C.size_t(d.Len), C.uint64_t(r.dev)
		raddr[i], rlen[i], rdev[i] = C.uintptr_t(uintptr(rr.addr)+uintptr(rd.Offset)), C.size_t(rd.Len), C.uint64_t(rr.dev)
		x.locals[i] = r
		x.bytes += d.Len
	}
	cremote := C.CString(remote)
	defer C.free(unsafe.Pointer(cremote))
	var np unsafe.Pointer
	if len(notif) > 0 {
		np = C.CBytes(notif)
		defer C.free(np)
	}
	hasNotif := 0
	if notif != nil {
		hasNotif = 1
	}
	nop := nixlRead
	if op == Write {
		nop = nixlWrite
	}
	if st := C.kvg_nixl_create_xfer(a.h, C.int(nop),
		C.int(lmem), &laddr[0], &llen[0], &ldev[0],
		C.int(rmem), &raddr[0], &rlen[0], &rdev[0],
		C.int(n), cremote, np, C.size_t(len(notif)), C.int(hasNotif), &x.req); st != nixlSuccess {
		return 0, nixlErr(fmt.Sprintf("createXferReq (%s, %d descriptors, to %q)", op, n, remote), st)
	}
	a.nextX++
	a.xfers[a.nextX] = x
	return a.nextX, nil
}

func (a *nixlEndpoint) Post(h Xfer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	x := a.xfers[h]
	if x == nil {
		return fmt.Errorf("kvagent/transfer: post %d: %w", h, ErrUnknownXfer)
	}
	for i, r := range x.locals {
		if a.regions[r.handle] != r {
			return fmt.Errorf("kvagent/transfer: post %d: local descriptor %d: %w %d (deregistered)", h, i, ErrUnknownRegion, r.handle)
		}
	}
	st := C.kvg_nixl_post(a.h, x.req)
	if st != nixlSuccess && st != nixlInProgress {
		return nixlErr(fmt.Sprintf("postXferReq %d", h), st)
	}
	x.posted, x.counted, x.finalErr = true, false, nil
	return nil
}

func (a *nixlEndpoint) Status(h Xfer) (State, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	x := a.xfers[h]
	if x == nil {
		return Failed, fmt.Errorf("kvagent/transfer: transfer %d: %w", h, ErrUnknownXfer)
	}
	if !x.posted {
		return NotPosted, nil
	}
	if x.counted {
		if x.finalErr != nil {
			return Failed, x.finalErr
		}
		return Done, nil
	}
	switch st := C.kvg_nixl_status(a.h, x.req); st {
	case nixlInProgress:
		return InProgress, nil
	case nixlSuccess:
		x.counted = true
		a.metrics.moved(x.op, x.bytes)
		a.metrics.finished(nil)
		return Done, nil
	default:
		x.counted = true
		x.finalErr = withReason(reasonRemote, nixlErr(fmt.Sprintf("transfer %d", h), st))
		a.metrics.finished(x.finalErr)
		return Failed, x.finalErr
	}
}

func (a *nixlEndpoint) GetNotifs() map[string][][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][][]byte{}
	var data unsafe.Pointer
	var n C.size_t
	if st := C.kvg_nixl_get_notifs(a.h, &data, &n); st != nixlSuccess {
		a.log.Warn("nixl getNotifs failed", "status", nixlStatus(st))
		return out
	}
	b := C.GoBytes(data, C.int(n))
	C.free(data)
	u32 := func() uint32 {
		v := binary.NativeEndian.Uint32(b)
		b = b[4:]
		return v
	}
	for agents := u32(); agents > 0; agents-- {
		name := string(b[:u32()])
		b = b[len(name):]
		for msgs := u32(); msgs > 0; msgs-- {
			l := u32()
			out[name] = append(out[name], append([]byte{}, b[:l]...))
			b = b[l:]
		}
	}
	return out
}

func (a *nixlEndpoint) GenNotif(remote string, msg []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.peers[remote]; !ok {
		return fmt.Errorf("kvagent/transfer: notify: %w %q", ErrUnknownRemote, remote)
	}
	cs := C.CString(remote)
	defer C.free(unsafe.Pointer(cs))
	var mp unsafe.Pointer
	if len(msg) > 0 {
		mp = C.CBytes(msg)
		defer C.free(mp)
	}
	if st := C.kvg_nixl_gen_notif(a.h, cs, mp, C.size_t(len(msg))); st != nixlSuccess {
		return nixlErr(fmt.Sprintf("genNotif to %q", remote), st)
	}
	return nil
}

func (a *nixlEndpoint) Release(h Xfer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	x := a.xfers[h]
	if x == nil {
		return fmt.Errorf("kvagent/transfer: release %d: %w", h, ErrUnknownXfer)
	}
	delete(a.xfers, h)
	if st := C.kvg_nixl_release(a.h, x.req); st != nixlSuccess {
		return nixlErr(fmt.Sprintf("releaseXferReq %d", h), st)
	}
	return nil
}

func (a *nixlEndpoint) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	for h, x := range a.xfers {
		C.kvg_nixl_release(a.h, x.req)
		delete(a.xfers, h)
	}
	for h, r := range a.regions {
		C.kvg_nixl_register(a.h, C.int(r.mem), C.uintptr_t(r.addr), C.size_t(r.length), C.uint64_t(r.dev), 1)
		unmap(r)
		delete(a.regions, h)
	}
	C.kvg_nixl_free(a.h)
	a.h = nil
	return nil
}
