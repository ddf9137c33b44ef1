//go:build kubeapiserver

package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kvgate/kvgate/lab/testkit/kubeapi"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// renderOnlyKinds are kinds the chart renders whose CRDs cannot be
// installed here, and why; the render checks (decode_test.go, mesh_test.go)
// are all they get.
var renderOnlyKinds = map[string]string{
	"EnvoyExtensionPolicy": "Envoy Gateway's CRDs are in github.com/envoyproxy/gateway (charts/gateway-crds-helm), a module this project may not use; package envoy's validator checks these objects against Envoy Gateway's v1alpha1 API",
	"EnvoyPatchPolicy":     "as EnvoyExtensionPolicy",
	"ClientTrafficPolicy":  "as EnvoyExtensionPolicy",
	"ServiceMonitor":       "the Prometheus Operator's CRD manifests are in github.com/prometheus-operator/prometheus-operator (example/prometheus-operator-crd), which the module proxy does not serve; only its pkg/apis/monitoring types module is, which the strict decoder uses",
	"PodMonitor":           "as ServiceMonitor",
}

// crdModules are CRD manifests beyond the kit's (GIE, Gateway API), from
// their projects' own modules: Istio's networking CRDs (EnvoyFilter,
// DestinationRule) as istio.io/api ships them.
var crdModules = []struct{ module, version, file string }{
	{"istio.io/api", "v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml"},
}

const fieldManager = "kvgate-chart-test"

// Every rendering of the chart (the defaults and each testdata file) is
// accepted by a real API server under server-side apply with strict field
// validation: the built-in kinds' schemas, the CRDs' structural schemas and
// CEL rules (InferencePool, HTTPRoute, BackendTLSPolicy, ReferenceGrant,
// EnvoyFilter, DestinationRule), the RBAC escalation check on the Roles;
// then each of the chart's ServiceAccounts may do exactly what its process
// needs (SubjectAccessReviews: every granted verb allowed, a sample of what
// must not be denied). Each scenario's objects are deleted before the next,
// so the grants seen are that scenario's alone.
func TestChartAcceptedByRealAPIServer(t *testing.T) {
	srv := kubeapi.Start(t)
	for _, c := range crdModules {
		dir := moduleDir(t, c.module, c.version)
		raw, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitYAML(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docs {
			if _, err := applyDoc(t, srv, doc, ""); err != nil {
				t.Fatalf("%s@%s %s[%d]: %v", c.module, c.version, c.file, i, err)
			}
		}
	}

	list := append([]string{}, scenarios...)
	if !slices.Contains(list, inferencePoolValues) {
		list = append(list, inferencePoolValues)
	}
	for _, sc := range list {
		t.Run(scenarioName(sc), func(t *testing.T) {
			ms := mustRender(t, sc, nil)
			namespaces := map[string]bool{releaseNamespace: true}
			for _, m := range ms {
				var head struct {
					Metadata struct{ Namespace string } `json:"metadata"`
				}
				if err := yaml.Unmarshal(m.YAML, &head); err != nil {
					t.Fatal(err)
				}
				if head.Metadata.Namespace != "" {
					namespaces[head.Metadata.Namespace] = true
				}
			}
			for ns := range namespaces {
				srv.Namespace(t, ns)
			}
			var applied []*unstructured.Unstructured
			t.Cleanup(func() { deleteAll(t, srv, applied) })
			kinds, skipped := map[string]int{}, map[string]int{}
			for _, m := range ms {
				if why, ok := renderOnlyKinds[m.Kind]; ok {
					if skipped[m.Kind] == 0 {
						t.Logf("%s: checked by rendering only (no CRD: %s)", m.Kind, why)
					}
					skipped[m.Kind]++
					continue
				}
				obj, err := applyDoc(t, srv, m.YAML, releaseNamespace)
				if err != nil {
					t.Errorf("%s refused: %v", m, err)
					continue
				}
				applied = append(applied, obj)
				kinds[m.Kind]++
			}
			if len(applied) == 0 {
				t.Fatal("nothing applied")
			}
			t.Logf("accepted: %v", kinds)
			checkGrants(t, srv, scenarioName(sc))
		})
	}

	// The server is the judge, strictly: a misspelt field of a built-in
	// kind, and a value an upstream CRD's schema forbids, are refused,
	// naming them.
	ms := mustRender(t, inferencePoolValues, nil)
	for _, c := range []struct{ kind, old, new, want string }{
		{"Deployment", "imagePullPolicy:", "imagePullPolcy:", "imagePullPolcy"},
		{"InferencePool", "failureMode: FailClose", "failureMode: FailSometimes", "failureMode"},
		{"HTTPRoute", "kind: InferencePool", "kind: InferencePool\n      port: 0", "port"},
	} {
		docs := byKind(ms, c.kind)
		if len(docs) == 0 || !strings.Contains(string(docs[0].YAML), c.old) {
			t.Fatalf("%s: no %q to change", c.kind, c.old)
		}
		bad := strings.Replace(string(docs[0].YAML), c.old, c.new, 1)
		_, err := applyDoc(t, srv, []byte(bad), releaseNamespace)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %q: got %v, want a refusal naming %s", c.kind, c.new, err, c.want)
		}
	}
}

// moduleDir downloads module@version through the module proxy (go mod
// download) and returns its directory in the module cache.
func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v", module, version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s", module, version, err, m.Error)
	}
	return m.Dir
}

// applyDoc server-side-applies one document as `kubectl apply
// --server-side --field-manager=kvgate-chart-test --validate=strict` does:
// the dynamic client's PATCH of type application/apply-patch+yaml with
// fieldValidation Strict (an unknown or duplicate field is an error, not a
// warning and a dropped field), the resource found by the server's own
// discovery. A CRD is waited for until it is Established and served.
func applyDoc(t *testing.T, srv *kubeapi.Server, doc []byte, defaultNamespace string) (*unstructured.Unstructured, error) {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	gvk := obj.GroupVersionKind()
	mapping, err := srv.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s is not served: %w", gvk, err)
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	res := srv.Dynamic.Resource(mapping.Resource)
	opts := metav1.PatchOptions{FieldManager: fieldManager, FieldValidation: "Strict"}
	ctx := context.Background()
	var out *unstructured.Unstructured
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(defaultNamespace)
		}
		out, err = res.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	} else {
		out, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	}
	if err != nil {
		return nil, err
	}
	if gvk.Kind == "CustomResourceDefinition" {
		waitServed(t, srv, out)
	}
	return out, nil
}

// waitServed waits for a CRD to be Established and its kinds to be in the
// server's discovery (the apiextensions controller serves it a moment after
// the create).
func waitServed(t *testing.T, srv *kubeapi.Server, crd *unstructured.Unstructured) {
	t.Helper()
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	poll.Until(t, "CRD "+crd.GetName()+" established and served", time.Minute, func() error {
		cur, err := srv.Dynamic.Resource(crdGVR).Get(context.Background(), crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return fmt.Errorf("not Established: %v", conds)
		}
		srv.Mapper.Reset()
		_, err = srv.Mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind})
		return err
	})
}

// deleteAll deletes what a scenario applied, so that the next one's grants
// are its own. (No kube-controller-manager runs: a namespace would never
// finish deleting, so the objects go one by one; none of them has a
// finalizer that needs a controller.)
func deleteAll(t *testing.T, srv *kubeapi.Server, objs []*unstructured.Unstructured) {
	for _, obj := range slices.Backward(objs) {
		gvk := obj.GroupVersionKind()
		mapping, err := srv.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("deleting %s %s: %v", gvk.Kind, obj.GetName(), err)
			continue
		}
		res := srv.Dynamic.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			err = res.Namespace(obj.GetNamespace()).Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
		} else {
			err = res.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
}

// access is one SubjectAccessReview: a verb on a resource (or subresource,
// or one named object) in a namespace ("" = cluster-scoped).
type access struct {
	verb, group, resource, sub, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.group != "" {
		r = a.group + "/" + r
	}
	if a.name != "" {
		r += " " + a.name
	}
	ns := a.namespace
	if ns == "" {
		ns = "(cluster)"
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, ns)
}

func verbs(vs []string, a access) []access {
	out := make([]access, len(vs))
	for i, v := range vs {
		out[i] = a
		out[i].verb = v
	}
	return out
}

// grants are what each ServiceAccount of a scenario may do: exactly what
// its process calls, per scenario. The extproc's discovery watches with
// informers (list, watch; get granted with them as for any reader):
// pods for label_selector (extproc/discovery/pods.go), EndpointSlices for
// service (extproc/discovery/endpointslices.go), the one InferencePool by
// a metadata.name field selector, InferenceObjectives and pods for
// inference_pool (extproc/discovery/inferencepool.go). The planner's
// kubernetes actuator gets, updates and patches /scale of the named
// workloads and gets, lists and patches pods to mark a replica draining
// (planner-sidecar/actuate/kubernetes.go). Nothing else calls the API.
func grants(scenario string) map[string][]access {
	read := []string{"get", "list", "watch"}
	switch scenario {
	case "istio":
		return map[string][]access{"extproc": verbs(read, access{resource: "pods", namespace: "inference"})}
	case "envoy-gateway":
		return map[string][]access{"extproc": verbs(read, access{group: "discovery.k8s.io", resource: "endpointslices", namespace: "inference"})}
	case "inference-pool":
		var a []access
		a = append(a, verbs(read, access{group: "inference.networking.k8s.io", resource: "inferencepools", namespace: releaseNamespace, name: releaseName})...)
		a = append(a, verbs(read, access{group: "inference.networking.x-k8s.io", resource: "inferenceobjectives", namespace: releaseNamespace})...)
		a = append(a, verbs(read, access{resource: "pods", namespace: releaseNamespace})...)
		return map[string][]access{"extproc": a}
	case "full":
		var a []access
		for _, w := range []string{"vllm-prefill", "vllm-decode"} {
			a = append(a, verbs([]string{"get", "update", "patch"}, access{group: "apps", resource: "deployments", sub: "scale", namespace: "inference", name: w})...)
		}
		a = append(a, verbs([]string{"get", "list", "patch"}, access{resource: "pods", namespace: "inference"})...)
		return map[string][]access{"planner": a}
	}
	return nil
}

// mustDeny is a sample of what no kvgate ServiceAccount may do, in every
// scenario: Secrets, exec and logs, writes to pods and workloads, other
// namespaces, other InferencePools, cluster-scoped reads, RBAC itself.
func mustDeny() []access {
	var a []access
	for _, ns := range []string{releaseNamespace, "inference", "default", "kube-system"} {
		a = append(a,
			access{verb: "get", resource: "secrets", namespace: ns},
			access{verb: "list", resource: "secrets", namespace: ns},
			access{verb: "create", resource: "pods", sub: "exec", namespace: ns},
			access{verb: "get", resource: "pods", sub: "log", namespace: ns},
			access{verb: "create", resource: "pods", namespace: ns},
			access{verb: "delete", resource: "pods", namespace: ns},
			access{verb: "update", resource: "pods", sub: "status", namespace: ns},
			access{verb: "get", resource: "configmaps", namespace: ns},
			access{verb: "update", group: "apps", resource: "deployments", namespace: ns, name: "vllm-prefill"},
			access{verb: "update", group: "apps", resource: "deployments", sub: "scale", namespace: ns, name: "other"},
			access{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: ns},
			access{verb: "update", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns, name: releaseName},
			access{verb: "update", group: "inference.networking.k8s.io", resource: "inferencepools", sub: "status", namespace: ns, name: releaseName},
			access{verb: "get", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns, name: "someone-elses-pool"},
			// A list of every pool (no metadata.name field selector) is
			// not a list of the one pool resourceNames allows.
			access{verb: "list", group: "inference.networking.k8s.io", resource: "inferencepools", namespace: ns},
			access{verb: "create", group: "inference.networking.x-k8s.io", resource: "inferenceobjectives", namespace: ns},
			access{verb: "get", group: "gateway.networking.k8s.io", resource: "httproutes", namespace: ns},
			// The discovery reads, denied wherever the scenario does not
			// grant them (checkGrants skips the granted ones).
			access{verb: "list", resource: "pods", namespace: ns},
			access{verb: "list", group: "discovery.k8s.io", resource: "endpointslices", namespace: ns},
			access{verb: "list", group: "inference.networking.x-k8s.io", resource: "inferenceobjectives", namespace: ns},
		)
	}
	return append(a,
		access{verb: "list", resource: "nodes"},
		access{verb: "list", resource: "namespaces"},
		access{verb: "list", resource: "pods"}, // all namespaces
		access{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
	)
}

// checkGrants asks the API server, for every ServiceAccount of the chart
// (one per component, serviceaccounts.yaml), whether each granted access is
// allowed and every other one of the sample denied.
func checkGrants(t *testing.T, srv *kubeapi.Server, scenario string) {
	t.Helper()
	allowed := grants(scenario)
	sas, err := srv.Clientset.CoreV1().ServiceAccounts(releaseNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + releaseName,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sas.Items) == 0 {
		t.Fatal("no ServiceAccounts applied")
	}
	checked := 0
	for _, sa := range sas.Items {
		component := sa.Labels["app.kubernetes.io/component"]
		want := allowed[component]
		for _, a := range want {
			if ok, reason := review(t, srv, sa.Name, a); !ok {
				t.Errorf("%s may not %s, which its process needs (%s)", sa.Name, a, reason)
			}
			checked++
		}
		for _, a := range mustDeny() {
			if slices.Contains(want, a) {
				continue
			}
			if ok, reason := review(t, srv, sa.Name, a); ok {
				t.Errorf("%s may %s: more than its process needs (%s)", sa.Name, a, reason)
			}
			checked++
		}
		// The granted verbs on anything but what is granted: another
		// namespace, a write verb.
		for _, a := range want {
			for _, other := range []access{withNamespace(a, "default"), withVerb(a, "delete"), withVerb(a, "create")} {
				if slices.Contains(want, other) {
					continue
				}
				if ok, reason := review(t, srv, sa.Name, other); ok {
					t.Errorf("%s may %s: more than its process needs (%s)", sa.Name, other, reason)
				}
				checked++
			}
		}
	}
	for component := range allowed {
		found := slices.ContainsFunc(sas.Items, func(sa corev1.ServiceAccount) bool { return sa.Labels["app.kubernetes.io/component"] == component })
		if !found {
			t.Errorf("no %s ServiceAccount rendered, but the scenario grants it %v", component, allowed[component])
		}
	}
	t.Logf("%d SubjectAccessReviews for %d ServiceAccounts", checked, len(sas.Items))
}

func withNamespace(a access, ns string) access { a.namespace = ns; return a }
func withVerb(a access, v string) access       { a.verb = v; return a }

// review is one SubjectAccessReview for the ServiceAccount
// releaseNamespace/name, with the groups the API server's token
// authenticator gives a ServiceAccount (k8s.io/apiserver
// pkg/authentication/serviceaccount/util.go, UserInfo).
func review(t *testing.T, srv *kubeapi.Server, sa string, a access) (bool, string) {
	t.Helper()
	res, err := srv.Clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + releaseNamespace + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s for %s: %v", a, sa, err)
	}
	reason := res.Status.Reason
	if reason == "" {
		reason = strings.TrimSpace(res.Status.EvaluationError)
	}
	return res.Status.Allowed, reason
}
