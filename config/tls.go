package config

import "github.com/kvgate/kvgate/internal/secretfiles"

// The TLS sections of kvgate's YAML are declared, validated and loaded in
// internal/secretfiles (issue 18: config declares and validates; reading
// certificates, keys and CA bundles at run time is that package's), where
// every component's Config finds them without importing config. These
// names keep config.ServerTLS and friends working for the sections config
// still composes.
type (
	ServerTLS = secretfiles.ServerTLS
	ClientTLS = secretfiles.ClientTLS
	PeerTLS   = secretfiles.PeerTLS
)
