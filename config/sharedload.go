package config

// SharedLoad shares in-flight load accounting between extproc replicas
// through the Redis index backend.
type SharedLoad struct{}

func (x *SharedLoad) applyDefaults() {}

// validate reports the first invalid value; path is the section's key path.
func (x *SharedLoad) validate(path string) error { return nil }
