package actuate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// discoveryKinds resolves a kind to its resource from the API server's
// discovery documents, as client-go's deferred discovery RESTMapper did
// (k8s.io/client-go v0.37.2 restmapper/discovery.go NewDiscoveryRESTMapper:
// a group's preferred version first, then its other versions in the order
// served), reading only the one group asked about. A resolved kind is kept;
// a miss is asked again next time (a CRD installed later resolves then).
type discoveryKinds struct {
	client rest.Interface

	mu   sync.Mutex
	seen map[schema.GroupKind]*meta.RESTMapping
}

var _ KindResolver = (*discoveryKinds)(nil)

func newDiscoveryKinds(cfg *rest.Config) (*discoveryKinds, error) {
	// The dynamic client's settings: JSON, no typed scheme.
	rc, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(cfg))
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return &discoveryKinds{client: rc, seen: map[schema.GroupKind]*meta.RESTMapping{}}, nil
}

// RESTMapping implements KindResolver. versions, when given, limit the
// versions considered, in that order.
func (d *discoveryKinds) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	d.mu.Lock()
	m, ok := d.seen[gk]
	d.mu.Unlock()
	if ok && (len(versions) == 0 || versions[0] == m.GroupVersionKind.Version) {
		return m, nil
	}
	ctx := context.Background()
	if len(versions) == 0 {
		var err error
		if versions, err = d.groupVersions(ctx, gk.Group); err != nil {
			return nil, err
		}
	}
	for _, v := range versions {
		gv := schema.GroupVersion{Group: gk.Group, Version: v}
		var list metav1.APIResourceList
		if err := d.get(ctx, &list, versionPath(gv)); err != nil {
			return nil, err
		}
		for _, r := range list.APIResources {
			if r.Kind != gk.Kind || strings.Contains(r.Name, "/") {
				continue // another kind, or a subresource (deployments/scale is kind Scale)
			}
			scope := meta.RESTScopeRoot
			if r.Namespaced {
				scope = meta.RESTScopeNamespace
			}
			m := &meta.RESTMapping{Resource: gv.WithResource(r.Name), GroupVersionKind: gv.WithKind(gk.Kind), Scope: scope}
			d.mu.Lock()
			d.seen[gk] = m
			d.mu.Unlock()
			return m, nil
		}
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

// groupVersions lists a group's versions, the preferred one first.
func (d *discoveryKinds) groupVersions(ctx context.Context, group string) ([]string, error) {
	if group == "" {
		var core metav1.APIVersions
		if err := d.get(ctx, &core, "/api"); err != nil {
			return nil, err
		}
		return core.Versions, nil
	}
	var g metav1.APIGroup
	if err := d.get(ctx, &g, "/apis/"+group); err != nil {
		return nil, err
	}
	versions := []string{g.PreferredVersion.Version}
	for _, v := range g.Versions {
		if v.Version != g.PreferredVersion.Version {
			versions = append(versions, v.Version)
		}
	}
	return versions, nil
}

func versionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// get reads one discovery document into out.
func (d *discoveryKinds) get(ctx context.Context, out any, path string) error {
	raw, err := d.client.Get().AbsPath(path).Do(ctx).Raw()
	if err != nil {
		return fmt.Errorf("discovery %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("discovery %s: %w", path, err)
	}
	return nil
}
