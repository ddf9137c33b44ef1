package adminhttp

import (
	"net/http"
	"time"
)

// NewServer is the HTTP server of an admin or service listener: a bound on
// reading the request headers, so a client that opens a connection and
// sends nothing (slowloris) cannot hold it forever.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
}
