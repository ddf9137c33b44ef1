package config

import (
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
)

// AdminAuth (admin_auth sections) is declared, validated and read in
// internal/secretfiles, like the TLS sections (tls.go).
type AdminAuth = secretfiles.AdminAuth

// IsLoopback is confaddr.IsLoopback: whether a listen address binds
// loopback only.
func IsLoopback(addr string) bool { return confaddr.IsLoopback(addr) }
