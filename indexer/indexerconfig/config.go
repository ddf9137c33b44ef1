// Package indexerconfig is the `indexer:` section of kvgate's
// configuration file: the `kvgate indexer` process's own keys (Config), their
// defaults (declared once, here) and their validation. The `index:` section
// every process shares is kv/indexconfig.
//
// It is a package of its own, not part of indexer, because config composes
// it and every kvgate process parses the file: declared in indexer, the
// section would link the subscriptions and backends into each of them.
// indexer takes it (ServiceConfig), not the file (issue 18).
package indexerconfig

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Config configures the `kvgate indexer` process (the indexer: section).
type Config struct {
	// Listen is the HTTP address for /metrics, /healthz and /readyz.
	Listen        string            `yaml:"listen"`
	ReplayTimeout yamlconf.Duration `yaml:"replay_timeout"`
	// EngineDeadAfter: an engine whose event socket stays unreachable this
	// long has its entries dropped from the index (rebuilt when it returns).
	EngineDeadAfter yamlconf.Duration `yaml:"engine_dead_after"`
	// AdminAuth protects the listener when it is not on loopback.
	AdminAuth secretfiles.AdminAuth `yaml:"admin_auth"`
	// EventsBind turns on bind mode: the indexer binds this ZMQ endpoint
	// (tcp://host:port; rank r binds port+r) and engines whose events is
	// "bind" connect their PUB sockets to it, as vLLM does with an endpoint
	// without a wildcard and llm-d deploys its indexer. Each such engine is
	// told apart by its topic.
	EventsBind string `yaml:"events_bind"`
	// EventsBindAllow lists the networks (CIDR or single IP) whose engines
	// may connect to EventsBind besides loopback; required when EventsBind
	// is not a loopback address.
	EventsBindAllow []string `yaml:"events_bind_allow"`
}

// Defaults for Config.
const (
	DefaultListen          = "127.0.0.1:9400"
	DefaultReplayTimeout   = 2 * time.Second
	DefaultEngineDeadAfter = 10 * time.Second
)

// ApplyDefaults fills every unset key of the indexer: section.
func (x *Config) ApplyDefaults() {
	if x.Listen == "" {
		x.Listen = DefaultListen
	}
	if x.ReplayTimeout == 0 {
		x.ReplayTimeout = yamlconf.Duration(DefaultReplayTimeout)
	}
	if x.EngineDeadAfter == 0 {
		x.EngineDeadAfter = yamlconf.Duration(DefaultEngineDeadAfter)
	}
}

// Validate reports the first invalid value of the indexer: section,
// naming its key path (path is the section's, "indexer" in the file).
func (x *Config) Validate(path string) error {
	if err := confaddr.CheckHostPort(x.Listen); err != nil {
		return fmt.Errorf("%s.listen: %w", path, err)
	}
	if err := x.AdminAuth.Validate(path + ".admin_auth"); err != nil {
		return err
	}
	if err := x.AdminAuth.CheckExposure(path+".listen", x.Listen, path+".admin_auth"); err != nil {
		return err
	}
	return x.validateEventsBind(path)
}

// EventsBindAllowPrefixes parses indexer.events_bind_allow (validated).
func (x Config) EventsBindAllowPrefixes() ([]netip.Prefix, error) {
	return x.eventsBindAllowPrefixes("indexer")
}

func (x Config) eventsBindAllowPrefixes(path string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range x.EventsBindAllow {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%s.events_bind_allow[%d]: %q is neither a CIDR nor an IP address", path, i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (x Config) validateEventsBind(path string) error {
	if x.EventsBind == "" {
		if len(x.EventsBindAllow) > 0 {
			return fmt.Errorf("%[1]s.events_bind_allow: set without %[1]s.events_bind", path)
		}
		return nil
	}
	u, err := url.Parse(x.EventsBind)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" {
		return fmt.Errorf("%s.events_bind: %q: want tcp://host:port", path, x.EventsBind)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("%s.events_bind: %q: %v", path, x.EventsBind, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("%s.events_bind: %q: bad port", path, x.EventsBind)
	}
	if _, err := x.eventsBindAllowPrefixes(path); err != nil {
		return err
	}
	loopback := host == "localhost"
	if a, err := netip.ParseAddr(host); err == nil {
		loopback = a.IsLoopback()
	}
	if !loopback && len(x.EventsBindAllow) == 0 {
		return fmt.Errorf("%[1]s.events_bind: %[2]q listens beyond loopback; list the engines' networks in %[1]s.events_bind_allow (anyone reaching the port could otherwise write routing state)", path, x.EventsBind)
	}
	return nil
}
