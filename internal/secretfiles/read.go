// Package secretfiles declares, validates and reads the secret material
// kvgate's processes are configured with: the TLS sections (certificates,
// keys and CA bundles, re-read per handshake), admin bearer tokens and
// passwords, from files or environment variables. It is a leaf (standard
// library and internal/yamlconf): every component's Config declares its
// TLS and admin_auth keys with these types without importing config, and
// config itself does no run-time I/O (issue 18). Errors name the file, the
// variable or the key path, never the secret.
package secretfiles

import (
	"fmt"
	"io"
	"os"
)

// MaxPEMBytes bounds one certificate, key or CA bundle file: a bundle of a
// few hundred CAs fits, a misconfigured path to a large file does not get
// read into memory on every handshake.
const MaxPEMBytes = 1 << 20

// ReadBounded reads at most limit bytes of path (more is an error naming
// the file, never its content): every secret file kvgate reads goes
// through it, so a misconfigured path to a large file is refused, not
// read into memory on every handshake or request.
func ReadBounded(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}
