// Package freeport picks free loopback ports for tests and tools that start
// real processes (redis-server, kvgate, the simulated engines) or must name
// a port in a configuration before anything binds it.
//
// Ports come from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), not from a bind to port 0: a port the
// kernel hands out for :0 is an ephemeral one, and between our close and
// the caller's bind any outgoing connection on the machine (a Redis
// client, an HTTP dial of a parallel test package) may be given it as its
// local port. CI saw exactly that: "bind: address already in use" on a
// port freeport had just returned. Below the range only another explicit
// bind can take it. The other binds that can are other processes'
// picks: `make test` runs several test binaries at once, and a test may
// hold a picked port for seconds before it binds (TestLocalRecipe builds a
// binary in between; CI saw "address already in use" there too). So a pick
// is also reserved machine-wide, a file named after the port created with
// O_EXCL under the temporary directory, and no other process is handed it
// until the reservation is reservationTTL old.
package freeport

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lowest is the bottom of the range picks come from: above the
// well-known and commonly configured service ports.
const lowest = 10000

// busOffset keeps port+10000 below the ephemeral range too: a Redis Cluster
// node listens for its peers on its port + 10000 (the cluster bus,
// redis.io/docs/latest/operate/oss_and_stack/management/scaling/), and the
// cluster tests start nodes on freeport's ports.
const busOffset = 10000

// reservationTTL is how long a pick stays reserved against other
// processes: longer than any test holds a port before binding it, short
// enough that the twelve thousand ports are not used up across runs.
const reservationTTL = 15 * time.Minute

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process already returned
)

// Port returns a loopback port that was free a moment ago and that no
// outgoing connection can be given meanwhile. Another process may still
// bind it first; callers that start a process retry a start that fails to
// bind.
func Port() (int, error) {
	lo, hi, ok := pickRange()
	mu.Lock()
	defer mu.Unlock()
	var lastErr error
	for i := 0; ok && i < 200; i++ {
		p := lo + rand.IntN(hi-lo)
		if handed[p] || !reserve(p) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			lastErr = err
			continue
		}
		ln.Close()
		handed[p] = true
		return p, nil
	}
	// Nothing free below the range (or no range to stay below): let the
	// kernel choose, with the race the package comment describes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w (below the ephemeral range: %v)", err, lastErr)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// reserve claims p against other processes using freeport: false when
// another process reserved it less than reservationTTL ago. Without a
// usable directory every port counts as reserved by no one (the bind
// check still applies).
func reserve(p int) bool {
	dir := filepath.Join(os.TempDir(), "kvgate-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	name := filepath.Join(dir, strconv.Itoa(p))
	for range 2 {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			f.Close()
			return true
		}
		if !errors.Is(err, fs.ErrExist) {
			return true
		}
		st, err := os.Stat(name)
		if err != nil || time.Since(st.ModTime()) < reservationTTL {
			return false
		}
		// Stale: take it over. Two processes doing so at once could both
		// win; they would also have to pick the same one of thousands of
		// ports in the same instant.
		os.Remove(name)
	}
	return false
}

// pickRange is [lowest, start of the ephemeral range - busOffset); not ok
// where the kernel's setting cannot be read or leaves too little room.
func pickRange() (lo, hi int, ok bool) {
	start, err := ephemeralStart()
	if err != nil || start-busOffset-lowest < 1000 {
		return 0, 0, false
	}
	return lowest, start - busOffset, true
}

func ephemeralStart() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, errors.New("ip_local_port_range: want two numbers")
	}
	return strconv.Atoi(f[0])
}

// Addr is Port as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// Pick is Port for a test: it fails t instead of returning an error.
func Pick(t testing.TB) int {
	t.Helper()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
