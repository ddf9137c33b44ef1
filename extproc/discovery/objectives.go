package discovery

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
)

// ObjectiveResource is InferenceObjective's API resource. GIE v1.5.0
// serves it at inference.networking.x-k8s.io/v1alpha2
// (apix/v1alpha2/inferenceobjective_types.go); from v1.6 it lives in
// llm-d-router, so the GIE module kvgate builds against (v1.6.2) has no Go
// type for it and kvgate reads it as unstructured data, by the v1.5.0
// type's field names.
var ObjectiveResource = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferenceobjectives"}

// objectivePriorities maps the name of each InferenceObjective that
// belongs to the pool to its priority. An objective belongs to the pool
// when its spec.poolRef names the pool and the pool's group (GIE v1.5.0
// pkg/epp/controller/inferenceobjective_reconciler.go compares poolRef's
// name and group; the CRD defaults the group to inference.networking.k8s.io);
// one being deleted no longer counts, as there. A missing spec.priority is
// 0, GIE's default (v1.5.0 pkg/epp/requestcontrol/director.go
// getInferenceObjective). Objectives that cannot be read are in skipped.
func objectivePriorities(objs []*unstructured.Unstructured, c kubeselect.InferencePool) (prio map[string]int, skipped []string) {
	c = c.WithDefaults()
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	prio = map[string]int{}
	for _, o := range objs {
		if o.GetDeletionTimestamp() != nil {
			continue
		}
		ref, _, err := unstructured.NestedString(o.Object, "spec", "poolRef", "name")
		if err != nil || ref != c.Name {
			continue
		}
		group, found, err := unstructured.NestedString(o.Object, "spec", "poolRef", "group")
		if err == nil && !found {
			group = kubeselect.InferencePoolGroup
		}
		if err != nil || group != c.Group {
			continue
		}
		p, found, err := unstructured.NestedInt64(o.Object, "spec", "priority")
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("inferenceobjective %s: spec.priority: %v", o.GetName(), err))
			continue
		}
		if !found {
			p = 0
		}
		prio[o.GetName()] = int(p)
	}
	return prio, skipped
}
