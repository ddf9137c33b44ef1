package indexconfig

import (
	"fmt"

	"github.com/kvgate/kvgate/internal/secretfiles"
)

// validateAuth checks the credentials and TLS keys of index.redis.
func (r *RedisIndex) validateAuth(path string) error {
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		return fmt.Errorf("%s: set password_env or password_file, not both", path)
	}
	if r.PasswordFile != "" {
		if _, err := secretfiles.Password(r.PasswordFile, r.PasswordEnv); err != nil {
			return fmt.Errorf("%s.password_file: %w", path, err)
		}
	}
	if len(r.Username) > 256 {
		return fmt.Errorf("%s.username: longer than 256 bytes", path)
	}
	for i := 0; i < len(r.Username); i++ {
		if c := r.Username[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%s.username: byte %d is a space, control or non-ASCII byte", path, i)
		}
	}
	if r.Username != "" && r.PasswordEnv == "" && r.PasswordFile == "" {
		return fmt.Errorf("%s.username: an ACL user needs a password (password_file or password_env)", path)
	}
	return r.TLS.Validate(path + ".tls")
}
