package actuate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Target is the workload behind one pool.
type Target struct {
	Group, Kind, Name, Namespace string
	// PodSelector (a label selector) finds the workload's pods, to map a
	// replica's endpoint (ip:port) to the pod to mark draining.
	PodSelector string
}

// Kubernetes sizes pools through the scale subresource, which Deployments,
// StatefulSets and any custom resource declaring one share, and marks
// drained pods with the kvgate.io/draining label (extproc then routes
// nothing new to them) and the lowest pod-deletion-cost (so that a
// Deployment's scale-down removes them rather than a busy pod).
type Kubernetes struct {
	pods    kubernetes.Interface
	scales  scale.ScalesGetter
	mapper  meta.RESTMapper
	targets map[string]Target
}

// NewKubernetes builds the actuator from clients (fakes in tests).
func NewKubernetes(pods kubernetes.Interface, scales scale.ScalesGetter, mapper meta.RESTMapper, targets map[string]Target) *Kubernetes {
	return &Kubernetes{pods: pods, scales: scales, mapper: mapper, targets: targets}
}

// KubernetesFromKubeconfig connects with a kubeconfig file, or the
// in-cluster service account when path is empty; kinds are resolved to
// resources through API discovery.
func KubernetesFromKubeconfig(path string, targets map[string]Target) (*Kubernetes, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("actuate kubernetes: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("actuate kubernetes: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("actuate kubernetes: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	sc, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(dc))
	if err != nil {
		return nil, fmt.Errorf("actuate kubernetes: %w", err)
	}
	return NewKubernetes(cs, sc, mapper, targets), nil
}

func (k *Kubernetes) resource(t Target) (schema.GroupResource, error) {
	m, err := k.mapper.RESTMapping(schema.GroupKind{Group: t.Group, Kind: t.Kind})
	if err != nil {
		return schema.GroupResource{}, fmt.Errorf("kind %s.%s: %w", t.Kind, t.Group, err)
	}
	return m.Resource.GroupResource(), nil
}

func (k *Kubernetes) pools() []string {
	var out []string
	for p := range k.targets {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Apply implements Actuator. Draining marks come first, so that no new
// request reaches a replica the scale-down will take; a failure on one
// pool does not stop the others.
func (k *Kubernetes) Apply(ctx context.Context, d plan.Decision) error {
	var errs []error
	for _, pool := range k.pools() {
		t := k.targets[pool]
		for _, name := range d.Drain[pool] {
			if err := k.markDraining(ctx, t, name); err != nil {
				errs = append(errs, fmt.Errorf("pool %s: drain %s: %w", pool, name, err))
			}
		}
		want, ok := d.Desired[pool]
		if !ok {
			continue
		}
		if err := k.setReplicas(ctx, t, int32(want)); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: scale %s/%s to %d: %w", pool, t.Namespace, t.Name, want, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("actuate kubernetes: %w", errors.Join(errs...))
	}
	return nil
}

func (k *Kubernetes) setReplicas(ctx context.Context, t Target, n int32) error {
	gr, err := k.resource(t)
	if err != nil {
		return err
	}
	sc := k.scales.Scales(t.Namespace)
	// Read-modify-write with the resource version: a conflicting writer
	// (kubectl scale, an HPA) makes us read again instead of overwriting.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := sc.Get(ctx, gr, t.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Spec.Replicas == n {
			return nil
		}
		s.Spec.Replicas = n
		_, err = sc.Update(ctx, gr, s, metav1.UpdateOptions{})
		return err
	})
}

// markDraining labels the pod behind a replica name: a pod name, or an
// endpoint ip:port matched against the target's pods' IPs.
func (k *Kubernetes) markDraining(ctx context.Context, t Target, name string) error {
	pod := name
	if host, _, ok := strings.Cut(name, ":"); ok || strings.Count(name, ".") == 3 {
		if !ok {
			host = name
		}
		list, err := k.pods.CoreV1().Pods(t.Namespace).List(ctx, metav1.ListOptions{LabelSelector: t.PodSelector})
		if err != nil {
			return err
		}
		pod = ""
		for _, p := range list.Items {
			if p.Status.PodIP == host {
				pod = p.Name
				break
			}
		}
		if pod == "" {
			return fmt.Errorf("no pod with IP %s matches %q in namespace %q", host, t.PodSelector, t.Namespace)
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{DrainingLabel: "true"},
		"annotations": map[string]string{DeletionCostAnnotation: "-1000"},
	}})
	_, err := k.pods.CoreV1().Pods(t.Namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Current implements Actuator: each target's spec.replicas.
func (k *Kubernetes) Current(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	var errs []error
	for _, pool := range k.pools() {
		t := k.targets[pool]
		gr, err := k.resource(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", pool, err))
			continue
		}
		s, err := k.scales.Scales(t.Namespace).Get(ctx, gr, t.Name, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %s: get scale of %s/%s: %w", pool, t.Namespace, t.Name, err))
			continue
		}
		out[pool] = int(s.Spec.Replicas)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("actuate kubernetes: %w", errors.Join(errs...))
	}
	return out, nil
}
