package config

// ServerTLS configures TLS (and optionally client-certificate auth) on a
// listener.
type ServerTLS struct{}

// validate reports the first invalid value; path is the section's key path.
func (x *ServerTLS) validate(path string) error { return nil }
