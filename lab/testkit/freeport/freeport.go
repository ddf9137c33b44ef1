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
// bind can take it, and each pick is random over some twelve thousand
// ports and checked by a bind, so parallel test processes rarely meet.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the bottom of the range picks come from: above the
// well-known and commonly configured service ports.
const lowest = 10000

// busOffset keeps port+10000 below the ephemeral range too: a Redis Cluster
// node listens for its peers on its port + 10000 (the cluster bus,
// redis.io/docs/latest/operate/oss_and_stack/management/scaling/), and the
// cluster tests start nodes on freeport's ports.
const busOffset = 10000

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
		if handed[p] {
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
