package discovery

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// poolSelector is the pool's pod selector. GIE v1's selector is
// matchLabels only (api/v1 shared_types.go LabelSelector: "This
// simplified version uses only the matchLabels field"), each pair
// required.
func poolSelector(pool *giev1.InferencePool) labels.Selector {
	set := labels.Set{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	if len(set) == 0 {
		// The CRD requires at least one label (MinProperties=1); a pool
		// that still has none selects nothing rather than every pod.
		return labels.Nothing()
	}
	return labels.SelectorFromSet(set)
}

// poolPorts is the pool's target port numbers in the pool's order, which
// is what the per-port KV-event offset counts by.
func poolPorts(pool *giev1.InferencePool) []int {
	ports := make([]int, 0, len(pool.Spec.TargetPorts))
	for _, p := range pool.Spec.TargetPorts {
		ports = append(ports, int(p.Number))
	}
	return ports
}

// workersFromPool turns an InferencePool and the pods of its namespace
// into workers: each ready pod its selector matches, times each target
// port, is one worker podIP:port (GIE v1.6.2 api/v1 InferencePoolSpec.
// TargetPorts: "each podIP:port combination is a distinct endpoint").
// Readiness and draining are the label discovery's (workersFromPods): a
// pod that is not ready is out; a ready pod being deleted, or marked
// kvgate.io/draining, stays as Draining. Pods outside the selector are
// ignored, so the caller may pass the whole namespace and a changed
// selector re-selects. Ready pods that cannot be used are in skipped with
// the reason.
func workersFromPool(pool *giev1.InferencePool, pods []*corev1.Pod, c kubeselect.InferencePool) (ws []kvfleet.Worker, skipped []string) {
	sel := poolSelector(pool)
	ports := poolPorts(pool)
	lc := c.Labels()
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Namespace != pool.Namespace || !sel.Matches(labels.Set(p.Labels)) || !podReady(p) {
			continue
		}
		ip := p.Status.PodIP
		if net.ParseIP(ip) == nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: bad pod IP %q", p.Name, ip))
			continue
		}
		id, err := readLabels(p.Labels, lc)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: %v", p.Name, err))
			continue
		}
		events, err := podPortBase(p.Annotations, kubeselect.EventsPortAnnotation, c.EventsPort, len(ports))
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: %v", p.Name, err))
			continue
		}
		replay, err := podPortBase(p.Annotations, kubeselect.ReplayPortAnnotation, c.ReplayPort, len(ports))
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: %v", p.Name, err))
			continue
		}
		if events == 0 {
			// Replay answers gaps in an event stream; without events there
			// is nothing to repair.
			replay = 0
		}
		draining := podDraining(p)
		for i, port := range ports {
			ep := net.JoinHostPort(ip, strconv.Itoa(port))
			if seen[ep] {
				skipped = append(skipped, fmt.Sprintf("pod %s: endpoint %s already taken by another pod", p.Name, ep))
				continue
			}
			seen[ep] = true
			w := kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: ep}, Model: id.model, Role: id.role, Kind: id.kind, Draining: draining}
			if events > 0 {
				w.Events = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(events+i))
			}
			if replay > 0 {
				w.Replay = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(replay+i))
			}
			ws = append(ws, w)
		}
	}
	sortWorkers(ws)
	return ws, skipped
}

// podPortBase reads a pod's port annotation (kubeselect.EventsPortAnnotation
// or ReplayPortAnnotation): def when absent, 0 for "0" (none), else the
// port, which with nPorts target ports must keep base + nPorts - 1 a port.
func podPortBase(annotations map[string]string, key string, def, nPorts int) (int, error) {
	v, ok := annotations[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("annotation %s=%q: want a port (1..65535) or 0 for none", key, v)
	}
	if n > 0 && n+max(nPorts, 1)-1 > 65535 {
		return 0, fmt.Errorf("annotation %s=%d: with %d target ports the last would be %d, past 65535", key, n, nPorts, n+nPorts-1)
	}
	return n, nil
}
