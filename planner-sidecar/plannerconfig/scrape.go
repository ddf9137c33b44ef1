package plannerconfig

import (
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Scrape configures direct /metrics scraping.
type Scrape struct {
	Timeout yamlconf.Duration `yaml:"timeout"`
	// Extproc is kvgate extproc's admin host:port ("" = not scraped).
	Extproc string `yaml:"extproc"`
	// TokenFile or TokenEnv is the bearer token every scrape sends
	// (`Authorization: Bearer <token>`, to extproc and the engines alike):
	// kvgate's admin listeners want it on /metrics beyond loopback. The
	// file is re-read on every scrape round, so a rotated Secret applies
	// at once; the token is never logged. The same tokens as admin_auth
	// are accepted (16..4096 printable bytes), checked when the planner
	// starts rather than when any process parses the file.
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
}

// Authenticated reports whether scrapes send a bearer token.
func (x Scrape) Authenticated() bool { return x.TokenFile != "" || x.TokenEnv != "" }

// Token returns the scrape token now (the file is read afresh). Errors
// name the file or variable, never the value.
func (x Scrape) Token() (string, error) {
	a := x.auth()
	return a.Token()
}

// auth is the token source as admin_auth reads it, so both accept and
// reject the same tokens.
func (x Scrape) auth() secretfiles.AdminAuth {
	return secretfiles.AdminAuth{TokenFile: x.TokenFile, TokenEnv: x.TokenEnv}
}
