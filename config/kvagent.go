package config

// Kvagent configures the `kvgate kvagent` node-local KV tier daemon.
type Kvagent struct{}

func (x *Kvagent) applyDefaults() {}

// validate reports the first invalid value; path is the section's key path.
func (x *Kvagent) validate(path string) error { return nil }
