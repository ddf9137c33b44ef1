package config

// Planner configures the `kvgate planner` sidecar.
type Planner struct{}

func (x *Planner) applyDefaults() {}

// validate reports the first invalid value; path is the section's key path.
func (x *Planner) validate(path string) error { return nil }
