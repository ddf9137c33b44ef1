package config

import (
	"fmt"
	"os"
	"strings"
)

// MaxRedisPasswordBytes bounds a password file read for every new
// connection.
const MaxRedisPasswordBytes = 4096

// Password returns the Redis password as configured now: the content of
// password_file (one trailing newline trimmed, as `echo` leaves it), the
// value of password_env, or "" for none. Errors name the file or variable,
// never the value.
func (r *RedisIndex) Password() (string, error) {
	switch {
	case r.PasswordFile != "":
		b, err := readBounded(r.PasswordFile, MaxRedisPasswordBytes)
		if err != nil {
			return "", err
		}
		p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if p == "" {
			return "", fmt.Errorf("%s is empty", r.PasswordFile)
		}
		return p, nil
	case r.PasswordEnv != "":
		v, ok := os.LookupEnv(r.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", r.PasswordEnv)
		}
		return v, nil
	}
	return "", nil
}

// validateAuth checks the credentials and TLS keys of index.redis.
func (r *RedisIndex) validateAuth(path string) error {
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		return fmt.Errorf("%s: set password_env or password_file, not both", path)
	}
	if r.PasswordFile != "" {
		if _, err := r.Password(); err != nil {
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
	return r.TLS.validate(path + ".tls")
}
