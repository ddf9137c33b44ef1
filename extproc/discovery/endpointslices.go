package discovery

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// workersFromSlices turns a Service's EndpointSlices into workers. An
// endpoint counts while it is serving (nil = true, per the EndpointSlice
// API); a terminating one is kept as Draining. Pod labels do not reach
// slices, so model and role come from the slice's labels, which the
// EndpointSlice controller copies from the Service, or from c.Model.
func workersFromSlices(eps []*discoveryv1.EndpointSlice, c kubeselect.Config) (ws []kvfleet.Worker, skipped []string) {
	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	byEndpoint := map[string]int{} // ip:port → index of its first worker in ws
	for _, s := range eps {
		port, err := slicePort(s, c)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("endpointslice %s: %v", s.Name, err))
			continue
		}
		id, err := readLabels(s.Labels, c)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("endpointslice %s: %v", s.Name, err))
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Serving != nil && !*e.Conditions.Serving {
				continue
			}
			if e.Conditions.Serving == nil && e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			draining := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			for _, addr := range e.Addresses {
				rws := rankWorkers(addr, port, id, draining, c)
				// During a rollout one address can sit in two slices for a
				// moment; it is one worker, draining only if every copy says so.
				if i, ok := byEndpoint[rws[0].ID.Endpoint]; ok {
					for r := range rws {
						ws[i+r].Draining = ws[i+r].Draining && draining
					}
					continue
				}
				byEndpoint[rws[0].ID.Endpoint] = len(ws)
				ws = append(ws, rws...)
			}
		}
	}
	sortWorkers(ws)
	return ws, skipped
}

// slicePort is c.Port, or the slice port named c.PortName, or the slice's
// only port when PortName is empty.
func slicePort(s *discoveryv1.EndpointSlice, c kubeselect.Config) (int, error) {
	if c.Port > 0 {
		return c.Port, nil
	}
	var found []int
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if p.Port != nil && *p.Port > 0 && *p.Port <= 65535 && (c.PortName == "" || name == c.PortName) {
			found = append(found, int(*p.Port))
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case c.PortName == "" && len(found) > 1:
		return 0, fmt.Errorf("%d ports and no port_name to choose one", len(found))
	}
	return 0, fmt.Errorf("no port named %q", c.PortName)
}
