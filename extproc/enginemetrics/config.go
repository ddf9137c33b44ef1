package enginemetrics

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Defaults for Config. llm-d scrapes every 50 ms with a 2 s staleness
// bound; kvgate's default interval is gentler, the bound the same.
const (
	DefaultInterval     = 250 * time.Millisecond
	DefaultTimeout      = time.Second
	DefaultMaxBodyBytes = 4 << 20
	DefaultStaleness    = 2 * time.Second

	minInterval = 10 * time.Millisecond
)

// Config tunes a Scraper. Zero (or negative) fields take the defaults.
//
// Its tagged fields are the configuration file's extproc.engine_metrics
// section, declared here and composed by extprocconfig.Config: scrape each
// engine's /metrics (vLLM and SGLang names) as extra load signals for the
// picker, queue depths and KV usage, which also count traffic other routers
// sent. The untagged ones are set in code.
type Config struct {
	// Disabled: the router starts no scraper.
	Disabled bool              `yaml:"disabled"`
	Interval yamlconf.Duration `yaml:"interval"` // between two scrapes of one target
	// Staleness: older samples are not reported by Get (ignored).
	Staleness yamlconf.Duration `yaml:"staleness"`

	Timeout      time.Duration `yaml:"-"` // one request, headers and body
	MaxBodyBytes int64         `yaml:"-"` // larger pages are failures (oversize)
	// Client overrides the HTTP client (tests, TLS); nil = a client that
	// ignores proxy settings and does not follow redirects.
	Client *http.Client `yaml:"-"`
	Log    *slog.Logger `yaml:"-"`
}

// ApplyDefaults fills the file's unset keys (config.Parse calls it), so
// that the parsed configuration shows the values the scraper runs with.
func (c *Config) ApplyDefaults() {
	if c.Interval <= 0 {
		c.Interval = yamlconf.Duration(DefaultInterval)
	}
	if c.Staleness <= 0 {
		c.Staleness = yamlconf.Duration(DefaultStaleness)
	}
}

func (c Config) withDefaults() Config {
	c.ApplyDefaults()
	c.Interval = max(c.Interval, yamlconf.Duration(minInterval))
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Client == nil {
		c.Client = &http.Client{
			Transport: &http.Transport{
				Proxy:               nil, // engines are scraped directly, never through a proxy from the environment
				DialContext:         (&net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConnsPerHost: 2,
				IdleConnTimeout:     90 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}
