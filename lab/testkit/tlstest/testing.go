package tlstest

import "testing"

// MustWrite writes a freshly issued leaf (the result of CA.Server, Client
// or Peer) into dir under its common name, failing t on any error, so a
// test can write `server := tlstest.MustWrite(t, dir)(ca.Server(...))`.
func MustWrite(t testing.TB, dir string) func(*Leaf, error) Files {
	return func(l *Leaf, err error) Files {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		f, err := l.Write(dir, l.Cert.Subject.CommonName)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// ExtprocPKI is the certificate set the ext_proc transport-security tests
// use, written into one folder: a CA, the extproc server's certificate for
// 127.0.0.1, Envoy's client certificate, and an unrelated CA with a client
// (the intruder) that the listener must refuse at the handshake. CA issues
// more (a rotated server certificate, say).
type ExtprocPKI struct {
	CA                      *CA
	CAFile, OtherCAFile     string
	Server, Envoy, Intruder Files
}

// NewExtprocPKI issues and writes an ExtprocPKI into dir, failing t on any
// error.
func NewExtprocPKI(t testing.TB, dir string) ExtprocPKI {
	t.Helper()
	ca, err := NewCA("kvgate test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("unrelated CA")
	if err != nil {
		t.Fatal(err)
	}
	p := ExtprocPKI{CA: ca}
	if p.CAFile, err = ca.Write(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if p.OtherCAFile, err = other.Write(dir, "other"); err != nil {
		t.Fatal(err)
	}
	issue := MustWrite(t, dir)
	p.Server = issue(ca.Server("extproc", "127.0.0.1"))
	p.Envoy = issue(ca.Client("envoy"))
	p.Intruder = issue(other.Client("intruder"))
	return p
}
