package transfer

import (
	"bytes"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestMetadataRoundTrip(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "node-a", Advertise: "10.0.0.7:7400", MaxMessageBytes: 1 << 20})
	mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 12345)})
	if _, err := a.RegisterMem(Region{Kind: FILE, Len: 1}); err == nil || !strings.Contains(err.Error(), "without a File") {
		t.Fatalf("FILE region without a file: %v", err)
	}
	mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 100), Offset: 10})
	md, err := a.LocalMetadata()
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	want := metadata{name: "node-a", addr: "10.0.0.7:7400", maxPayload: 1 << 20, regions: []remoteRegion{{1, DRAM, 12345}, {2, DRAM, 90}}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decoded %+v, want %+v", m, want)
	}
}

func TestMetadataRejects(t *testing.T) {
	good := metadata{name: "b", addr: "127.0.0.1:1", maxPayload: 1 << 20, regions: []remoteRegion{{1, DRAM, 10}, {2, FILE, 20}}}
	reencode := func(f func(m *metadata)) []byte {
		m := good
		m.regions = append([]remoteRegion(nil), good.regions...)
		f(&m)
		return m.encode()
	}
	b := good.encode()
	for _, c := range []struct {
		name string
		md   []byte
		want string
	}{
		{"empty", nil, "bytes"},
		{"tcp magic missing", append([]byte("NIXL"), b[4:]...), "magic"},
		{"other version", func() []byte { x := bytes.Clone(b); x[4] = 2; return x }(), "version"},
		{"bit flipped", func() []byte { x := bytes.Clone(b); x[9] ^= 1; return x }(), "checksum"},
		{"truncated", b[:len(b)-5], "checksum"},
		{"empty name", reencode(func(m *metadata) { m.name = "" }), "name"},
		{"empty address", reencode(func(m *metadata) { m.addr = "" }), "address"},
		{"max payload 0", reencode(func(m *metadata) { m.maxPayload = 0 }), "max message"},
		{"handle 0", reencode(func(m *metadata) { m.regions[0].handle = 0 }), "handle"},
		{"handle twice", reencode(func(m *metadata) { m.regions[1].handle = 1 }), "handle"},
		{"unknown kind", reencode(func(m *metadata) { m.regions[1].kind = 9 }), "kind"},
		{"negative length", reencode(func(m *metadata) { m.regions[1].length = -1 }), "length"},
	} {
		a, _ := newTestAgent(t, TCPConfig{Name: "a"})
		if _, err := a.LoadRemoteMetadata(c.md); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

var fuzzAgent = sync.OnceValue(func() *tcpEndpoint {
	a, err := newTCP(TCPConfig{Name: "fuzz"})
	if err != nil {
		panic(err)
	}
	return a
})

// FuzzLoadRemoteMetadata: any blob loads or is refused, never a panic or
// an unbounded allocation; what loads re-encodes to the same bytes.
func FuzzLoadRemoteMetadata(f *testing.F) {
	f.Add(metadata{name: "b", addr: "127.0.0.1:7400", maxPayload: 1 << 20, regions: []remoteRegion{{1, DRAM, 1 << 30}, {7, FILE, 4096}}}.encode())
	f.Add(metadata{name: "x", addr: "[::1]:1", maxPayload: minMessageBytes}.encode())
	f.Add([]byte("KVGT\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, md []byte) {
		a := fuzzAgent()
		name, err := a.LoadRemoteMetadata(md)
		if err != nil {
			return
		}
		m, err := decodeMetadata(md)
		if err != nil || m.name != name {
			t.Fatalf("loaded as %q but decodes as %q, %v", name, m.name, err)
		}
		if !bytes.Equal(m.encode(), md) {
			t.Fatal("re-encoded metadata differs from the input")
		}
		a.InvalidateRemote(name)
	})
}
