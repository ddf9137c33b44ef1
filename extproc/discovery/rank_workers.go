package discovery

import (
	"net"
	"strconv"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// rankWorkers expands one engine at ip:port into its data-parallel ranks.
// Rank r's KV events are on EventsPort + r (and replay on ReplayPort + r),
// the offset vLLM applies per data-parallel rank. Validate has bounded the
// ports so that the sums stay under 65536.
func rankWorkers(ip string, port int, model string, role kvfleet.Role, draining bool, c kubeselect.Config) []kvfleet.Worker {
	ep := net.JoinHostPort(ip, strconv.Itoa(port))
	ws := make([]kvfleet.Worker, 0, c.DPRanks)
	for r := range c.DPRanks {
		w := kvfleet.Worker{
			ID:       kvfleet.WorkerID{Endpoint: ep, DPRank: r},
			Model:    model,
			Role:     role,
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

// modelAndRole reads a worker's model and role from labels, falling back
// to c.Model for the model.
func modelAndRole(lbls map[string]string, c kubeselect.Config) (string, kvfleet.Role, error) {
	model := lbls[c.ModelLabel]
	if model == "" {
		model = c.Model
	}
	if model == "" {
		return "", 0, errNoModel
	}
	role, err := parseRoleLabel(lbls[c.RoleLabel])
	if err != nil {
		return "", 0, err
	}
	return model, role, nil
}
