package secretfiles

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kvgate/kvgate/internal/confaddr"
)

// AdminAuth protects admin endpoints exposed beyond loopback: requests
// must carry `Authorization: Bearer <token>`, the token read from a file
// (re-read per request, so a rotated Secret applies at once) or an
// environment variable. A listener on a non-loopback address with no token
// stops the process at start unless allow_unauthenticated says the
// exposure is deliberate (a NetworkPolicy or a private interface guards it).
//
//	admin_auth:
//	  token_file: /var/run/secrets/kvgate/admin-token   # or token_env: KVGATE_ADMIN_TOKEN
//	  allow_unauthenticated: false
type AdminAuth struct {
	TokenFile            string `yaml:"token_file"`
	TokenEnv             string `yaml:"token_env"`
	AllowUnauthenticated bool   `yaml:"allow_unauthenticated"`
}

// Token bounds: 16 bytes is 128 bits of a random hex or base64 token's
// worth guessing; 4 KiB bounds a misconfigured file read per request.
const (
	MinAdminTokenBytes = 16
	MaxAdminTokenBytes = 4096
)

// Configured reports whether a token source is set.
func (x *AdminAuth) Configured() bool { return x.TokenFile != "" || x.TokenEnv != "" }

// Token returns the current token. Errors name the file or variable,
// never the value.
func (x *AdminAuth) Token() (string, error) {
	switch {
	case x.TokenFile != "":
		b, err := ReadBounded(x.TokenFile, MaxAdminTokenBytes)
		if err != nil {
			return "", err
		}
		return checkToken(string(b))
	case x.TokenEnv != "":
		v, ok := os.LookupEnv(x.TokenEnv)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", x.TokenEnv)
		}
		if len(v) > MaxAdminTokenBytes {
			return "", fmt.Errorf("environment variable %s: longer than %d bytes", x.TokenEnv, MaxAdminTokenBytes)
		}
		return checkToken(v)
	}
	return "", errors.New("no token_file or token_env")
}

// checkToken trims the surrounding white space files usually end with
// (echo's newline) and rejects short or non-printable tokens, which could
// not be sent in a header anyway.
func checkToken(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) < MinAdminTokenBytes {
		return "", fmt.Errorf("token is %d bytes, want at least %d", len(s), MinAdminTokenBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("token byte %d is a space, control or non-ASCII byte", i)
		}
	}
	return s, nil
}

// Validate reports the first invalid value, reading the token once; path
// is the section's key path.
func (x *AdminAuth) Validate(path string) error {
	if x.TokenFile != "" && x.TokenEnv != "" {
		return fmt.Errorf("%s: set token_file or token_env, not both", path)
	}
	if x.Configured() && x.AllowUnauthenticated {
		return fmt.Errorf("%s.allow_unauthenticated: true contradicts the token configured", path)
	}
	if !x.Configured() {
		return nil
	}
	if _, err := x.Token(); err != nil {
		key := "token_file"
		if x.TokenEnv != "" {
			key = "token_env"
		}
		return fmt.Errorf("%s.%s: %w", path, key, err)
	}
	return nil
}

// CheckExposure refuses an admin listener on a non-loopback address that
// has no token, unless the section allows it explicitly. addrKey and
// authPath are the key paths named in the error.
func (x *AdminAuth) CheckExposure(addrKey, addr, authPath string) error {
	if confaddr.IsLoopback(addr) || x.Configured() || x.AllowUnauthenticated {
		return nil
	}
	return fmt.Errorf("%s: %q is not a loopback address and %s has no token: set %s.token_file or %s.token_env, "+
		"or set %s.allow_unauthenticated: true to expose it without authentication", addrKey, addr, authPath, authPath, authPath, authPath)
}
