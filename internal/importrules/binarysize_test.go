package importrules

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What made bin/kvgate 137 MB (issue 27 item 4), kept out on the real
// import graph of the binary as `make build` and the image build it
// (-tags grpcnotrace):
//   - golang.org/x/net/trace, which gRPC links unless built with
//     grpcnotrace (google.golang.org/grpc v1.85.0 trace_notrace.go): its
//     html/template reaches reflect.Value.MethodByName with a name known
//     only at run time, so the linker keeps every exported method of every
//     type in the binary (about 50 MB here);
//   - client-go's typed clientsets, informer factories, discovery, scale
//     and RESTMapper clients, whose scheme registers every built-in API
//     group at init and so links all of k8s.io/api; discovery and the
//     planner use the dynamic client and need only these API groups.
var leanKubeAPIGroups = []string{"k8s.io/api/core/v1", "k8s.io/api/discovery/v1"}

func forbiddenForSize(p string) string {
	switch {
	case p == "golang.org/x/net/trace" || p == "html/template" || p == "text/template":
		return "a template engine, which keeps every exported method of every linked type (build with -tags grpcnotrace)"
	case p == "k8s.io/client-go/kubernetes" || strings.HasPrefix(p, "k8s.io/client-go/kubernetes/"),
		p == "k8s.io/client-go/informers" || strings.HasPrefix(p, "k8s.io/client-go/informers/"),
		p == "k8s.io/client-go/discovery" || strings.HasPrefix(p, "k8s.io/client-go/discovery/"),
		p == "k8s.io/client-go/scale" || strings.HasPrefix(p, "k8s.io/client-go/scale/"),
		p == "k8s.io/client-go/restmapper",
		strings.HasPrefix(p, "sigs.k8s.io/gateway-api-inference-extension/client-go/"):
		return "a typed Kubernetes client, whose scheme links every API group (use the dynamic client)"
	case strings.HasPrefix(p, "k8s.io/api/") && !slices.Contains(leanKubeAPIGroups, p):
		return "another Kubernetes API group's types"
	}
	return ""
}

// TestProductionBinaryStaysLean: the binary as built links none of the
// above.
func TestProductionBinaryStaysLean(t *testing.T) {
	g := map[string][]string{}
	for _, l := range goList(t, "-deps", "-tags=grpcnotrace", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./cmd/kvgate") {
		f := strings.Fields(l)
		g[f[0]] = f[1:]
	}
	if _, ok := g[module+"/cmd/kvgate"]; !ok {
		t.Fatalf("go list -deps ./cmd/kvgate did not list the binary itself (%d packages)", len(g))
	}
	for p := range g {
		if why := forbiddenForSize(p); why != "" {
			t.Errorf("./cmd/kvgate links %s: %s; imported by %v", p, why, importers(g, p))
		}
	}
}

// TestBuildsPassGRPCNoTrace: every build of bin/kvgate that ships (make
// build, the image) carries the tag the rule above assumes.
func TestBuildsPassGRPCNoTrace(t *testing.T) {
	kvgateBuild := regexp.MustCompile(`(?m)^.*\bbuild\b.*\./cmd/kvgate\s*$`)
	for _, f := range []string{"../../Makefile", "../../deploy/Dockerfile"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := kvgateBuild.FindAllString(string(data), -1)
		if len(lines) == 0 {
			t.Fatalf("%s: no build of ./cmd/kvgate found", f)
		}
		for _, l := range lines {
			if !strings.Contains(l, "-tags grpcnotrace") {
				t.Errorf("%s: %q builds ./cmd/kvgate without -tags grpcnotrace", f, strings.TrimSpace(l))
			}
		}
	}
}
