// Package confaddr checks the address forms kvgate's YAML takes. It is kept
// apart from internal/yamlconf because it needs package net (for parsing
// only, no I/O), which the request path's pure core must not link
// (internal/importrules).
package confaddr

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// The address forms kvgate's YAML takes: listen and dial addresses
// (host:port) and ZMQ endpoints (tcp://host:port). Every component's
// Config checks its addresses with these, so that one key is refused the
// same way wherever it appears.

// CheckHostPort accepts host:port with a port in 0..65535 (0: any free
// port, for listeners) and a host without '/' or spaces.
func CheckHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want host:port", s)
	}
	if strings.ContainsAny(host, "/ ") {
		return fmt.Errorf("%q: bad host", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
}

// ZMQEndpoint validates a tcp://host:port endpoint and returns it with the
// port offset by rank: vLLM's ZmqEventPublisher.offset_endpoint_port
// (vllm/distributed/kv_events.py) adds the data-parallel rank to the TCP
// port, rank 0 keeping the endpoint as configured.
func ZMQEndpoint(ep string, rank int) (string, int, error) {
	if rank < 0 {
		return "", 0, fmt.Errorf("%q: negative data-parallel rank %d", ep, rank)
	}
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" {
		return "", 0, fmt.Errorf("%q: want tcp://host:port", ep)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %v", ep, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port+rank > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", ep)
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(port+rank)), port + rank, nil
}

// IsLoopback reports whether a listen address host:port binds loopback
// only: "localhost" or a loopback IP. An empty host or 0.0.0.0 / :: binds
// every interface; any other name could resolve anywhere, so it counts as
// exposed.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
