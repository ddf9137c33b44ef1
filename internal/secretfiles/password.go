package secretfiles

import (
	"fmt"
	"os"
	"strings"
)

// MaxPasswordBytes bounds a password file, which is read for every new
// connection (go-redis' CredentialsProvider).
const MaxPasswordBytes = 4096

// Password returns a password as configured now: the content of file (one
// trailing newline trimmed, as `echo` leaves it), the value of the
// environment variable env, or "" when neither is set. Errors name the
// file or variable, never the value. Redis' index.redis.password_file and
// password_env are read with it.
func Password(file, env string) (string, error) {
	switch {
	case file != "":
		b, err := ReadBounded(file, MaxPasswordBytes)
		if err != nil {
			return "", err
		}
		p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if p == "" {
			return "", fmt.Errorf("%s is empty", file)
		}
		return p, nil
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", env)
		}
		return v, nil
	}
	return "", nil
}
