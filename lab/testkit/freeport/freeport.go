// Package freeport picks free loopback ports for tests and tools that start
// real processes (redis-server, kvgate, the simulated engines) or must name
// a port in a configuration before anything binds it.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// Port asks the kernel for a free loopback port. Another process may take
// it before the caller binds; callers that start a process retry a start
// that fails to bind.
func Port() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
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
