package config

// Outlier configures passive outlier ejection: workers whose upstream
// responses fail or time out are ejected for a while and slow-started back.
type Outlier struct{}

func (x *Outlier) applyDefaults() {}

// validate reports the first invalid value; path is the section's key path.
func (x *Outlier) validate(path string) error { return nil }
