package connector

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Who is calling: the quota key of a client and, on the peer listener, the
// identity its capabilities are bound to.

// client describes the other end of one connection, as the first request
// on it shows it.
type client struct {
	// key groups connections for the per-client quota: "pid:N" (an engine
	// process on the Unix socket, from SO_PEERCRED), "peer:<identity>" (a
	// peer's certificate) or "ip:<host>" (a plaintext TCP peer).
	key string
	// identity is the peer's certificate identity (PeerIdentity), "" on a
	// plaintext connection or the Unix socket.
	identity string
	// names are the names the certificate gives (CN, SANs), matched
	// against Config.PeerNamespaces.
	names []string
	// loopback: a TCP connection from a loopback address, or the Unix
	// socket.
	loopback bool
}

func clientOf(ctx context.Context) client {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return client{key: "unknown"}
	}
	if pa, ok := p.Addr.(processAddr); ok {
		// A Unix socket is as local as loopback.
		return client{key: fmt.Sprintf("pid:%d", pa.pid), loopback: true}
	}
	var c client
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		c.key, c.loopback = "ip:"+tcp.IP.String(), tcp.IP.IsLoopback()
	} else {
		c.key = "addr:" + p.Addr.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		leaf := ti.State.PeerCertificates[0]
		c.identity, c.names = PeerIdentity(leaf), certNames(leaf)
		c.key = "peer:" + c.identity
	}
	return c
}

// PeerIdentity names a peer by what its certificate says it is: the
// subject CN and every DNS, IP and URI SAN, sorted. It stays the same
// across renewals of a node's certificate (the key and serial change, the
// names do not), so a capability issued over the control channel still
// matches on a transfer connection opened with the renewed certificate; it
// tells peers apart as far as their certificates name them apart (one
// wildcard certificate for every node makes them one identity). "" for
// nil.
func PeerIdentity(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	return strings.Join(certNames(c), ",")
}

func certNames(c *x509.Certificate) []string {
	var names []string
	if c.Subject.CommonName != "" {
		names = append(names, "CN="+c.Subject.CommonName)
	}
	for _, d := range c.DNSNames {
		names = append(names, "DNS="+d)
	}
	for _, ip := range c.IPAddresses {
		names = append(names, "IP="+ip.String())
	}
	for _, u := range c.URIs {
		names = append(names, "URI="+u.String())
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// processAddr is the remote address of an engine connection on the Unix
// socket: the credentials of the process that connected (SO_PEERCRED,
// read by the kernel at connect: unix(7)), so that one process's
// connections share a quota.
type processAddr struct {
	pid, uid int32
}

func (a processAddr) Network() string { return "unix" }
func (a processAddr) String() string  { return fmt.Sprintf("pid %d uid %d", a.pid, a.uid) }

// credListener hands out Unix connections that report their peer's
// process as their remote address.
type credListener struct{ *net.UnixListener }

func (l credListener) Accept() (net.Conn, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	addr := processAddr{pid: -1, uid: -1} // unknown: such connections share one quota
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
				addr = processAddr{pid: cred.Pid, uid: int32(cred.Uid)}
			}
		})
	}
	return credConn{c, addr}, nil
}

type credConn struct {
	*net.UnixConn
	addr processAddr
}

func (c credConn) RemoteAddr() net.Addr { return c.addr }

// socketMode is the engine socket's mode: owner and group (the engines'
// group) may connect; connecting needs write permission (unix(7)).
const socketMode = 0o660

// ListenUnix listens on a Unix socket at path, replacing a stale socket
// file left by a previous process (a live one is refused). The socket is
// the arena's key, so it never exists with more permissions than
// socketMode: the socket's inode gets the mode before bind(2), which
// creates the file with it less the umask (Linux: unix_bind_bsd in
// net/unix/af_unix.c takes the mode from the socket inode), and a chmod
// afterwards only restores group bits a umask took away. Connections
// report the connecting process (SO_PEERCRED) as their remote address.
func ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("connector: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("connector: %s: another kvagent is serving it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("connector: removing stale socket: %w", err)
		}
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = syscall.Fchmod(int(fd), socketMode) }); cerr != nil {
			return cerr
		}
		return err
	}}
	l, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connector: listen %s: %w", filepath.Clean(path), err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("connector: chmod %s: %w", path, err)
	}
	return credListener{l.(*net.UnixListener)}, nil
}
