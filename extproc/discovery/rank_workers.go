package discovery

import (
	"fmt"
	"net"
	"strconv"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// rankWorkers expands one engine at ip:port into its data-parallel ranks.
// Rank r's KV events are on EventsPort + r (and replay on ReplayPort + r),
// the offset vLLM applies per data-parallel rank. Validate has bounded the
// ports so that the sums stay under 65536.
func rankWorkers(ip string, port int, id workerLabels, draining bool, c kubeselect.Config) []kvfleet.Worker {
	ep := net.JoinHostPort(ip, strconv.Itoa(port))
	ws := make([]kvfleet.Worker, 0, c.DPRanks)
	for r := range c.DPRanks {
		w := kvfleet.Worker{
			ID:       kvfleet.WorkerID{Endpoint: ep, DPRank: r},
			Model:    id.model,
			Role:     id.role,
			Kind:     id.kind,
			Draining: draining,
		}
		if c.EventsPort > 0 {
			w.Events = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(c.EventsPort+r))
		}
		if c.ReplayPort > 0 {
			w.Replay = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(c.ReplayPort+r))
		}
		ws = append(ws, w)
	}
	return ws
}

// workerLabels is what a worker's labels say about it.
type workerLabels struct {
	model string
	role  kvfleet.Role
	kind  string // engine kind (kvfleet.Worker.Kind)
}

// readLabels reads a worker's model, role and engine kind from labels,
// falling back to c.Model for the model and c.DefaultEngine for the kind.
// c must have its defaults (WithDefaults or InferencePool.Labels).
func readLabels(lbls map[string]string, c kubeselect.Config) (workerLabels, error) {
	model := lbls[c.ModelLabel]
	if model == "" {
		model = c.Model
	}
	if model == "" {
		return workerLabels{}, errNoModel
	}
	role, err := parseRoleLabel(lbls[c.RoleLabel])
	if err != nil {
		return workerLabels{}, err
	}
	kind := lbls[c.EngineLabel]
	if kind == "" {
		kind = c.DefaultEngine
	}
	if _, err := kvevents.FormatOf(kind); err != nil {
		return workerLabels{}, fmt.Errorf("label %s: %w", c.EngineLabel, err)
	}
	return workerLabels{model: model, role: role, kind: kind}, nil
}
