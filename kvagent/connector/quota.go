package connector

import (
	"fmt"
	"time"
)

// Quota bounds the slots the clients of one listener hold pinned —
// reserved (Reserve, until Commit or Abort) plus acquired (Acquire, until
// Release) — and for how long, so that no client, and no group of peers,
// can pin the arena and starve the engines' offloads. A zero field is no
// bound.
type Quota struct {
	// PerConnection bounds the slots one connection holds.
	PerConnection int
	// PerClient bounds the slots one client holds over all its
	// connections: an engine process on the Unix socket (by SO_PEERCRED
	// pid), a peer on TCP (by certificate identity, or by IP without TLS).
	PerClient int
	// Total bounds the slots all clients of the listener hold together
	// (the peer listener: what remote agents may take from local engines).
	Total int
	// HoldTimeout gives back a reservation or acquisition that is not
	// committed, aborted or released within it, although its connection
	// stays open: the slots are aborted / released, a later Commit or
	// Release of them is refused, and a capability over them stops
	// working.
	HoldTimeout time.Duration
	// ConfigKey is the configuration section the quota comes from
	// (kvagent.quotas.engine) and ClientKey the name of PerClient in it
	// (per_process, per_peer; default per_client): refusals and the
	// metrics' scope label use them.
	ConfigKey, ClientKey string
}

// quotaError is a refusal for lack of quota: which bound, what is held.
type quotaError struct {
	scope string // per_connection, per_client, total
	key   string // Quota.ConfigKey
	held  int
	limit int
	want  int
}

func (e *quotaError) Error() string {
	who := map[string]string{"per_connection": "this connection holds", "total": "the clients of this listener hold"}[e.scope]
	if who == "" {
		who = "this client holds"
	}
	key := e.scope
	if e.key != "" {
		key = e.key + "." + e.scope
	}
	return fmt.Sprintf("quota: %s %d slots of at most %d (%s), no room for %d more; commit, abort or release some first", who, e.held, e.limit, key, e.want)
}

// room is how many more slots a connection holding conn, whose client
// holds cl, may take while the listener's clients hold total, and the
// bound that allows the least (nil when none applies).
func (q Quota) room(conn, cl, total int) (int, *quotaError) {
	room := int(^uint(0) >> 1)
	var tightest *quotaError
	clientKey := q.ClientKey
	if clientKey == "" {
		clientKey = "per_client"
	}
	for _, b := range []quotaError{{scope: "per_connection", held: conn, limit: q.PerConnection}, {scope: clientKey, held: cl, limit: q.PerClient}, {scope: "total", held: total, limit: q.Total}} {
		if b.limit <= 0 {
			continue
		}
		if r := max(b.limit-b.held, 0); r < room {
			room, b.key = r, q.ConfigKey
			tightest = &b
		}
	}
	return room, tightest
}
