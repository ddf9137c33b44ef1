package transfer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// Error reasons, the values of kvgate_kvagent_transfer_errors_total's
// reason label.
const (
	reasonConnect    = "connect"     // dialing the peer failed
	reasonTLS        = "tls"         // handshake or certificate refused
	reasonHandshake  = "handshake"   // the peer answered, but not as the agent we loaded
	reasonTimeout    = "timeout"     // nothing arrived within IOTimeout
	reasonPeerClosed = "peer_closed" // the connection ended (peer died or closed)
	reasonChecksum   = "checksum"    // a frame's checksum did not match
	reasonProtocol   = "protocol"    // a frame that breaks the protocol
	reasonRemote     = "remote"      // the peer refused or failed our request
	reasonLocalIO    = "local_io"    // reading or writing a local FILE region failed
	reasonCanceled   = "canceled"    // released while in progress
	reasonClosed     = "closed"      // the local agent closed
	reasonRejected   = "rejected"    // we refused a peer's request (as target)
)

// reasonError tags an error with its metrics reason.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

func withReason(reason string, err error) error {
	var re *reasonError
	if err == nil || errors.As(err, &re) {
		return err
	}
	return &reasonError{reason, err}
}

// reasonOf classifies an error for the errors counter.
func reasonOf(err error) string {
	var re *reasonError
	var rem *RemoteError
	var ne net.Error
	var rec tls.RecordHeaderError
	var ae tls.AlertError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var tve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &re):
		return re.reason
	case errors.As(err, &rem):
		return reasonRemote
	case errors.Is(err, ErrCanceled):
		return reasonCanceled
	case errors.Is(err, ErrClosed):
		return reasonClosed
	case errors.As(err, &tve), errors.As(err, &ae), errors.As(err, &rec), errors.As(err, &ue), errors.As(err, &he), errors.As(err, &ci), isTLSAlert(err):
		return reasonTLS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return reasonTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return reasonPeerClosed
	}
	return reasonPeerClosed
}

type metrics struct {
	bytes       *prometheus.CounterVec
	transfers   *prometheus.CounterVec
	errors      *prometheus.CounterVec
	connections *prometheus.CounterVec
	// per-frame counters, resolved once: a label lookup per frame shows
	// in profiles
	readBytes, writeBytes prometheus.Counter
}

// newMetrics creates the agent's counters and registers them on reg (nil:
// counted, never exported). Several agents in one process share one set:
// a collector already registered is reused.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_transfer_bytes_total",
			Help: "Bytes moved by transfers this agent initiated: read = pulled from peers, write = pushed to them."}, []string{"direction"}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_transfers_total",
			Help: "Transfers this agent initiated, by how they ended."}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_transfer_errors_total",
			Help: "Transfer errors by reason: connect, tls, handshake, timeout, peer_closed, checksum, protocol, remote, local_io, canceled, closed (failed transfers this agent initiated), rejected (peer requests this agent refused)."}, []string{"reason"}),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_transfer_connections_total",
			Help: "Connections past the handshake, by side (initiator: opened by this agent; target: accepted) and the protocol version the two ends agreed on."}, []string{"side", "version"}),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.bytes, &m.transfers, &m.errors, &m.connections} {
			if err := reg.Register(*c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, fmt.Errorf("kvagent/transfer: register metrics: %w", err)
				}
				existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
				if !ok {
					return nil, fmt.Errorf("kvagent/transfer: register metrics: %w", err)
				}
				*c = existing
			}
		}
	}
	m.readBytes = m.bytes.WithLabelValues(Read.String())
	m.writeBytes = m.bytes.WithLabelValues(Write.String())
	for _, r := range []string{"done", "failed"} {
		m.transfers.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) moved(op Op, n int64) {
	if op == Read {
		m.readBytes.Add(float64(n))
	} else {
		m.writeBytes.Add(float64(n))
	}
}

func (m *metrics) finished(err error) {
	if err == nil {
		m.transfers.WithLabelValues("done").Inc()
		return
	}
	m.transfers.WithLabelValues("failed").Inc()
	m.errors.WithLabelValues(reasonOf(err)).Inc()
}

func (m *metrics) rejected() { m.errors.WithLabelValues(reasonRejected).Inc() }

// connected counts a connection past its handshake (side: initiator or
// target).
func (m *metrics) connected(side string, version uint8) {
	m.connections.WithLabelValues(side, strconv.Itoa(int(version))).Inc()
}

// isTLSAlert reports an alert the peer sent: crypto/tls returns it as a
// *net.OpError with Op "remote error".
func isTLSAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}
