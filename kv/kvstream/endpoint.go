package kvstream

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// guardedEndpoint validates a tcp:// or ipc:// endpoint and rewrites it to
// the matching guarded transport. The wildcard host "*" is refused: it is
// a bind address (vLLM's default tcp://*:5557), not one to dial.
func guardedEndpoint(ep string) (string, error) {
	return rewriteEndpoint(ep, func(host string, port int) (string, error) {
		if host == "" || host == "*" {
			return "", fmt.Errorf("endpoint %q: host %q is a bind address; name the engine's host", ep, host)
		}
		if port < 1 {
			return "", fmt.Errorf("endpoint %q: port %d is not in 1..65535", ep, port)
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	})
}

// rewriteEndpoint validates tcp://host:port (tcpAddr checks and rewrites
// the host and port) or ipc://path and names the guarded transport.
func rewriteEndpoint(ep string, tcpAddr func(host string, port int) (string, error)) (string, error) {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok {
		return "", fmt.Errorf("endpoint %q: want tcp://host:port or ipc://path", ep)
	}
	switch scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("endpoint %q: %w", ep, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return "", fmt.Errorf("endpoint %q: port %q is not in 1..65535", ep, port)
		}
		a, err := tcpAddr(host, p)
		if err != nil {
			return "", err
		}
		return guardedTCP + "://" + a, nil
	case "ipc":
		if addr == "" {
			return "", fmt.Errorf("endpoint %q: empty ipc path", ep)
		}
		return guardedIPC + "://" + addr, nil
	default:
		return "", fmt.Errorf("endpoint %q: unsupported transport %q (want tcp or ipc)", ep, scheme)
	}
}
