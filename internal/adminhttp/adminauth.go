// Package adminhttp is what every kvgate process's admin listener
// (/metrics, /healthz, /readyz, /debug/*) shares: the bearer-token check
// and the HTTP server's bounds.
package adminhttp

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
)

// probePaths stay open when a token is required: kubelet httpGet probes
// can send only headers written in the pod spec (the token would sit in
// plain text in every Deployment), and these answer "ok" / "ready" and
// nothing else. /metrics, /status and /debug/* describe the fleet and its
// traffic, so they need the token (Prometheus sends one with
// authorization.credentials_file).
var probePaths = map[string]bool{"/healthz": true, "/readyz": true}

// maxAuthorizationBytes bounds the header compared: the token is at most
// secretfiles.MaxAdminTokenBytes.
const maxAuthorizationBytes = len("Bearer ") + secretfiles.MaxAdminTokenBytes

// WithAdminAuth wraps an admin handler. With a token configured, every
// request but the probes must carry `Authorization: Bearer <token>`
// (compared in constant time, the token re-read per request so a rotated
// Secret applies at once); otherwise the handler is returned as is:
// config validation has already refused a non-loopback address without a
// token unless allow_unauthenticated was set, which is logged here.
func WithAdminAuth(h http.Handler, addrKey, addr string, auth secretfiles.AdminAuth, log *slog.Logger) http.Handler {
	if !auth.Configured() {
		if !confaddr.IsLoopback(addr) {
			log.Warn("admin endpoints exposed without authentication (admin_auth.allow_unauthenticated)", "key", addrKey, "addr", addr)
		}
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probePaths[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		presented, ok := BearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate admin"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		want, err := auth.Token()
		if err != nil {
			// Fail closed; the error names the file, not the token.
			log.Error("admin token unreadable: refusing admin requests", "key", addrKey, "err", err)
			http.Error(w, "admin token unavailable", http.StatusServiceUnavailable)
			return
		}
		// Hashing first makes the comparison constant-time in the length
		// too (ConstantTimeCompare returns early on a length mismatch).
		p, q := sha256.Sum256([]byte(presented)), sha256.Sum256([]byte(want))
		if subtle.ConstantTimeCompare(p[:], q[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate admin", error="invalid_token"`)
			http.Error(w, "unauthorized: wrong token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// BearerToken extracts the token of an RFC 6750 `Bearer` credential (the
// scheme is case-insensitive, RFC 9110 §11.1).
func BearerToken(header string) (string, bool) {
	if len(header) > maxAuthorizationBytes {
		return "", false
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
