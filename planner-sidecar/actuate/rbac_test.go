package actuate

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// A check without an API server, for `make test`: kubeapiserver_test.go
// applies the same manifest to a real one and asks it (SubjectAccessReview).
// The manifest must decode as Kubernetes objects and grant exactly what
// the actuator calls: /scale get+update (patch for kubectl-style tools)
// and pods list+patch.
func TestRBACManifestGrantsWhatTheActuatorUses(t *testing.T) {
	data, err := os.ReadFile("../rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.Role
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		kinds[gvk.Kind] = true
		if r, ok := obj.(*rbacv1.Role); ok {
			role = r
		}
	}
	if !kinds["ServiceAccount"] || !kinds["RoleBinding"] || role == nil {
		t.Fatalf("kinds %v", kinds)
	}
	allows := func(group, resource, verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, c := range [][3]string{
		{"apps", "deployments/scale", "get"}, {"apps", "deployments/scale", "update"},
		{"apps", "statefulsets/scale", "get"}, {"apps", "statefulsets/scale", "update"},
		{"", "pods", "list"}, {"", "pods", "patch"},
	} {
		if !allows(c[0], c[1], c[2]) {
			t.Errorf("role does not allow %s %s/%s", c[2], c[0], c[1])
		}
	}
	if allows("apps", "deployments", "update") || allows("", "pods", "delete") {
		t.Error("role grants more than the actuator needs")
	}
}
