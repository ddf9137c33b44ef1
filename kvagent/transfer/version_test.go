package transfer

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// streamVersions reports the protocol version of each open stream from a
// to peer.
func streamVersions(t *testing.T, a *tcpEndpoint, peer string) []uint8 {
	t.Helper()
	a.mu.Lock()
	p := a.peers[peer]
	a.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []uint8
	for _, s := range p.streams {
		if s != nil {
			s.mu.Lock()
			out = append(out, s.version)
			s.mu.Unlock()
		}
	}
	return out
}

// Agents of protocol versions 2 and 3 move the same bytes either way: a
// version-3 initiator that a version-2 target refuses dials again offering
// 2 (and offers 2 from then on); a version-2 initiator's hello gets a
// version-2 answer from a version-3 target. The version-2 agents here are
// this code capped at 2 (TCPConfig.maxVersion), which on the wire accepts
// and offers exactly what the version-2 code did: HELLO version 2 only,
// CRC-32C frames.
//
// Over TLS as well, where version 3 frames carry no checksum of their own.
func TestTCPProtocolVersionsInteroperate(t *testing.T) {
	ca := newTestCA(t, "kvgate test CA")
	for _, c := range []struct {
		initiator, target, want uint8
		tls                     bool
	}{
		{3, 3, 3, false},
		{3, 2, 2, false},
		{2, 3, 2, false},
		{2, 2, 2, false},
		{3, 3, 3, true},
		{3, 2, 2, true},
		{2, 3, 2, true},
	} {
		t.Run(fmt.Sprintf("v%d to v%d, TLS %v", c.initiator, c.target, c.tls), func(t *testing.T) {
			var atls, btls *tls.Config
			if c.tls {
				atls, btls = mutualTLS(ca.issue(t, "a"), ca.pool), mutualTLS(ca.issue(t, "b"), ca.pool)
			}
			a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 2, maxVersion: c.initiator, InboundWrites: true, TLS: atls})
			b, _ := newTestAgent(t, TCPConfig{Name: "b", maxVersion: c.target, InboundWrites: true, TLS: btls})
			// Frames of several checksum chunks and a short last one.
			const n = 3*sumChunk + 1234
			remote := pattern(7, 4*n)
			local := make([]byte, 4*n)
			rh := mustRegister(t, b, Region{Kind: DRAM, Addr: remote})
			lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
			load(t, a, b)
			var ld, rd []Desc
			for off := int64(0); off < 4*n; off += n {
				ld = append(ld, Desc{Region: lh, Offset: off, Len: n})
				rd = append(rd, Desc{Region: rh, Offset: off, Len: n})
			}
			if err := await(t, a, post(t, a, Read, ld, "b", rd)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(local, remote) {
				t.Fatal("read: bytes differ")
			}
			copy(local, pattern(8, 4*n))
			if err := await(t, a, post(t, a, Write, ld, "b", rd)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(local, remote) {
				t.Fatal("write: bytes differ")
			}
			vs := streamVersions(t, a, "b")
			if len(vs) == 0 {
				t.Fatal("no open streams")
			}
			for i, v := range vs {
				if v != c.want {
					t.Fatalf("stream %d speaks version %d, want %d", i, v, c.want)
				}
			}
			want := fmt.Sprint(c.want)
			if got := testutil.ToFloat64(a.metrics.connections.WithLabelValues("initiator", want)); got != float64(len(vs)) {
				t.Fatalf("initiator connections{version=%s} = %v, want %d", want, got, len(vs))
			}
			if got := testutil.ToFloat64(b.metrics.connections.WithLabelValues("target", want)); got != float64(len(vs)) {
				t.Fatalf("target connections{version=%s} = %v, want %d", want, got, len(vs))
			}
		})
	}
}

// The version-3 checksum covers the header and every payload byte, and a
// frame read in pieces of any size sums the same as one written whole.
func TestFrameSumV3(t *testing.T) {
	p := pattern(3, 2*sumChunk+77)
	b := encodeFrameVersion(t, 3, frameHeader{typ: frameData, xfer: 1, region: 1}, p)
	for _, piece := range []int{1, 1000, sumChunk - 1, sumChunk, len(b)} {
		fr := newFrameReader(&pieces{b: b, n: piece}, 1<<20)
		fr.useVersion(3, false)
		if _, err := readFrameFrom(fr); err != nil {
			t.Fatalf("read in pieces of %d: %v", piece, err)
		}
	}
	for _, i := range []int{1, 5, 14, frameHeadLen, frameHeadLen + sumChunk, len(b) - 1} {
		bad := bytes.Clone(b)
		bad[i] ^= 0x04
		fr := newFrameReader(bytes.NewReader(bad), 1<<20)
		fr.useVersion(3, false)
		if _, err := readFrameFrom(fr); err == nil {
			t.Fatalf("bit flipped at byte %d: read without error", i)
		}
	}
	// Each version's frame fails the other's check.
	fr := newFrameReader(bytes.NewReader(b), 1<<20)
	if _, err := readFrameFrom(fr); err == nil {
		t.Fatal("a version-3 frame passed the version-2 check")
	}
}

// Version-3 frames over TLS carry 0 in the checksum field and nothing is
// computed; each end's reader accepts them only so configured.
func TestFrameSumOverTLS(t *testing.T) {
	p := pattern(6, sumChunk+5)
	var buf bytes.Buffer
	fw := newFrameWriter(&buf)
	fw.useVersion(3, true)
	if err := fw.write(frameHeader{typ: frameData, xfer: 1, region: 1}, p); err != nil {
		t.Fatal(err)
	}
	fw.flush()
	b := buf.Bytes()
	if got := binary.BigEndian.Uint32(b[4:]); got != 0 {
		t.Fatalf("checksum field %#x over TLS, want 0", got)
	}
	fr := newFrameReader(bytes.NewReader(b), 1<<20)
	fr.useVersion(3, true)
	if f, err := readFrameFrom(fr); err != nil || !bytes.Equal(f.payload, p) {
		t.Fatalf("reading it back over TLS: %v", err)
	}
	fr = newFrameReader(bytes.NewReader(b), 1<<20)
	fr.useVersion(3, false)
	if _, err := readFrameFrom(fr); err == nil {
		t.Fatal("a plaintext version-3 reader accepted a frame without a checksum")
	}
}

func encodeFrameVersion(t *testing.T, v uint8, h frameHeader, p []byte) []byte {
	var buf bytes.Buffer
	fw := newFrameWriter(&buf)
	fw.useVersion(v, false)
	if err := fw.write(h, p); err != nil {
		t.Fatal(err)
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pieces returns at most n bytes per Read.
type pieces struct {
	b []byte
	n int
}

func (r *pieces) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}
