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
