//go:build helm || kubeapiserver

package deploy

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/kvgate/kvgate/config"
)

// docs/quickstart-vllm.md and docs/quickstart-sglang.md, checked block by
// block (the blocks marked <!-- quickstart: NAME -->): the kvgate config
// loads and validates; each engine's KV-event flags agree with it; the
// Helm values render the chart, and the Gateway, HTTPRoute and engine
// Deployments shown decode strictly and agree with the rendered pool and
// config. By design not run: vllm serve and sglang.launch_server (a GPU),
// docker, kind, istioctl, kubectl and curl against a cluster (the page
// marks those blocks "not run by the test").

const (
	quickstartVLLM   = "../docs/quickstart-vllm.md"
	quickstartSGLang = "../docs/quickstart-sglang.md"
)

// quickstartBlock returns the body of the first fenced block after the
// marker <!-- quickstart: name.
func quickstartBlock(t *testing.T, doc, name string) string {
	t.Helper()
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	marker := "<!-- quickstart: " + name
	i := strings.Index(s, marker)
	if i < 0 {
		t.Fatalf("%s has no %q block", doc, marker)
	}
	s = s[i:]
	open := strings.Index(s, "```")
	if open < 0 {
		t.Fatalf("%s: no fenced block after %q", doc, marker)
	}
	s = s[open+3:]
	s = s[strings.Index(s, "\n")+1:]
	end := strings.Index(s, "```")
	if end < 0 {
		t.Fatalf("%s: unterminated block after %q", doc, marker)
	}
	return s[:end]
}

// shellWords splits a command line as sh does for the quoting the pages
// use: backslash-newline continues, single quotes keep their content.
func shellWords(t *testing.T, cmd string) []string {
	t.Helper()
	cmd = strings.ReplaceAll(cmd, "\\\n", " ")
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range cmd {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", cmd)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// engineFlags are an engine command line's options: "--name=value" and
// "--name value" both give name → value; a flag followed by another flag
// (or last) is a switch with value "".
func engineFlags(args []string) map[string]string {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			value = args[i+1]
			i++
		}
		flags[name] = value
	}
	return flags
}

// kvEventsConfig is the --kv-events-config JSON: the fields of vLLM's
// KVEventsConfig (vllm/config/kv_events.py, 00634b8a) and SGLang's
// (python/sglang/srt/disaggregation/kv_events.py, 006d053f), which share
// all but enable_kv_cache_events.
type kvEventsConfig struct {
	Enable         *bool   `json:"enable_kv_cache_events"`
	Publisher      string  `json:"publisher"`
	Endpoint       string  `json:"endpoint"`
	ReplayEndpoint string  `json:"replay_endpoint"`
	Topic          *string `json:"topic"`
	BufferSteps    int     `json:"buffer_steps"`
	HWM            int     `json:"hwm"`
	MaxQueueSize   int     `json:"max_queue_size"`
}

// engineKind says whose defaults apply to a command line.
type engineKind struct {
	name      string
	blockFlag string   // tokens per KV block
	disabling []string // flags that turn prefix caching off
	// publisherDefault is the publisher when the JSON names none: vLLM's
	// is zmq once events are enabled, SGLang's is null.
	publisherDefault string
	needsEnable      bool
}

var (
	vllmEngine   = engineKind{name: "vLLM", blockFlag: "block-size", disabling: []string{"no-enable-prefix-caching"}, publisherDefault: "zmq", needsEnable: true}
	sglangEngine = engineKind{name: "SGLang", blockFlag: "page-size", disabling: []string{"disable-radix-cache"}, publisherDefault: "null"}
)

// port returns the port of tcp://host:port or host:port.
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: port %q", addr, p)
	}
	return n
}

// engineSide is what an engine's flags promise kvgate.
type engineSide struct {
	served                 string
	httpPort, blockSize    int
	eventsPort, replayPort int
	topic                  string
}

// checkEngineFlags checks one engine command line (its flags) for what
// kvgate needs and returns what it promises.
func checkEngineFlags(t *testing.T, kind engineKind, flags map[string]string) engineSide {
	t.Helper()
	var ev kvEventsConfig
	raw, ok := flags["kv-events-config"]
	if !ok {
		t.Fatalf("%s: no --kv-events-config", kind.name)
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("%s --kv-events-config %s: %v", kind.name, raw, err)
	}
	if kind.needsEnable && (ev.Enable == nil || !*ev.Enable) {
		t.Errorf("%s: enable_kv_cache_events is not true: no events", kind.name)
	}
	publisher := ev.Publisher
	if publisher == "" {
		publisher = kind.publisherDefault
	}
	if publisher != "zmq" {
		t.Errorf("%s: publisher %q, want zmq", kind.name, publisher)
	}
	// A wildcard host binds (the engine's socket heuristic); kvgate then
	// connects to the engine's IP.
	for _, ep := range []string{ev.Endpoint, ev.ReplayEndpoint} {
		if !strings.HasPrefix(ep, "tcp://*:") {
			t.Errorf("%s: endpoint %q: want tcp://*:PORT (the engine binds, kvgate connects)", kind.name, ep)
		}
	}
	for _, off := range kind.disabling {
		if _, ok := flags[off]; ok {
			t.Errorf("%s: --%s turns prefix caching off", kind.name, off)
		}
	}
	side := engineSide{served: flags["served-model-name"], eventsPort: port(t, ev.Endpoint), replayPort: port(t, ev.ReplayEndpoint)}
	if ev.Topic != nil {
		side.topic = *ev.Topic
	}
	var err error
	if side.httpPort, err = strconv.Atoi(flags["port"]); err != nil {
		t.Errorf("%s: --port %q", kind.name, flags["port"])
	}
	if side.blockSize, err = strconv.Atoi(flags[kind.blockFlag]); err != nil {
		t.Errorf("%s: --%s %q: set it to kvgate's block_size", kind.name, kind.blockFlag, flags[kind.blockFlag])
	}
	return side
}

// checkAgainstConfig checks that kvgate's config routes to engines started
// with side's flags.
func checkAgainstConfig(t *testing.T, side engineSide, cfg config.Config) {
	t.Helper()
	if len(cfg.Models) != 1 || len(cfg.Engines) == 0 {
		t.Fatalf("want one model and engines, got %d models, %d engines", len(cfg.Models), len(cfg.Engines))
	}
	m := cfg.Models[0]
	if m.Name != side.served || m.BlockSize != side.blockSize {
		t.Errorf("models[0] %s block_size %d; the engine serves %q with blocks of %d", m.Name, m.BlockSize, side.served, side.blockSize)
	}
	if m.Tokenizer == "" {
		t.Errorf("models[0] has no tokenizer: the extproc would exit 2")
	}
	for i, e := range cfg.Engines {
		if e.Model != side.served || port(t, e.Endpoint) != side.httpPort || port(t, e.Events) != side.eventsPort ||
			port(t, e.Replay) != side.replayPort || e.Topic != side.topic {
			t.Errorf("engines[%d] %+v does not match the engine's flags %+v", i, e, side)
		}
		host, _, _ := net.SplitHostPort(e.Endpoint)
		if !strings.HasPrefix(e.Events, "tcp://"+host+":") || !strings.HasPrefix(e.Replay, "tcp://"+host+":") {
			t.Errorf("engines[%d]: events %s and replay %s must be on the engine's own host %s", i, e.Events, e.Replay, host)
		}
	}
}

// The engine command and the kvgate config of each page agree, and the
// config is one kvgate's parser accepts.
func TestQuickstartEngineFlagsMatchConfig(t *testing.T) {
	for _, c := range []struct {
		doc, command string
		kind         engineKind
	}{
		{quickstartVLLM, "vllm-serve", vllmEngine},
		{quickstartSGLang, "sglang-serve", sglangEngine},
	} {
		t.Run(c.kind.name, func(t *testing.T) {
			cfg, err := config.Parse(strings.NewReader(quickstartBlock(t, c.doc, "kvgate-config")))
			if err != nil {
				t.Fatalf("kvgate config: %v", err)
			}
			if _, err := cfg.Workers(); err != nil {
				t.Fatalf("kvgate config: %v", err)
			}
			side := checkEngineFlags(t, c.kind, engineFlags(shellWords(t, quickstartBlock(t, c.doc, c.command))))
			checkAgainstConfig(t, side, cfg)
		})
	}
}

// The Kubernetes walk-through: the Helm values render; the Gateway, the
// HTTPRoute and both engine Deployments decode strictly; the route sends
// to the rendered pool through the Gateway; the pool selects the engines'
// pods on their HTTP port; the rendered kvgate config takes their KV
// events from the ports their flags publish on, in blocks of their size,
// and mounts its tokenizer; the image is the one the page builds.
func TestQuickstartKubernetesWalkThrough(t *testing.T) {
	values := filepath.Join(t.TempDir(), "kvgate-values.yaml")
	if err := os.WriteFile(values, []byte(quickstartBlock(t, quickstartVLLM, "helm-values")), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, mustRender(t, values, nil))
	var pool *giev1.InferencePool
	for _, o := range objs {
		if p, ok := o.(*giev1.InferencePool); ok {
			pool = p
		}
	}
	if pool == nil {
		t.Fatal("the values render no InferencePool")
	}
	cfg, err := config.Parse(strings.NewReader(renderedConfig(t, objs)))
	if err != nil {
		t.Fatalf("rendered config: %v", err)
	}
	ip := cfg.Extproc.Discovery.InferencePool
	if ip == nil || len(cfg.Models) != 1 {
		t.Fatalf("rendered config has no inference_pool discovery or not one model: %+v", cfg.Extproc.Discovery)
	}
	extproc := container(t, objs, "extproc")
	if extproc.Image != "kvgate:dev" {
		t.Errorf("extproc image %q, want the kvgate:dev the page builds", extproc.Image)
	}
	if !slices.ContainsFunc(extproc.VolumeMounts, func(m corev1.VolumeMount) bool {
		return strings.HasPrefix(cfg.Models[0].Tokenizer, m.MountPath+"/")
	}) {
		t.Errorf("tokenizer %s is on no volume the extproc mounts (%v)", cfg.Models[0].Tokenizer, extproc.VolumeMounts)
	}

	d, err := newStrictDecoder()
	if err != nil {
		t.Fatal(err)
	}
	decode := func(doc, name string) any {
		obj, err := d.decode(manifest{Template: doc, Kind: name, YAML: []byte(quickstartBlock(t, doc, name))})
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	gw, ok := decode(quickstartVLLM, "gateway").(*gatewayv1.Gateway)
	if !ok {
		t.Fatal("the gateway block is not a Gateway")
	}
	route, ok := decode(quickstartVLLM, "httproute").(*gatewayv1.HTTPRoute)
	if !ok {
		t.Fatal("the httproute block is not an HTTPRoute")
	}
	if len(route.Spec.ParentRefs) != 1 || string(route.Spec.ParentRefs[0].Name) != gw.Name || route.Namespace != gw.Namespace {
		t.Errorf("the HTTPRoute's parent %v is not the Gateway %s/%s", route.Spec.ParentRefs, gw.Namespace, gw.Name)
	}
	if len(route.Spec.Rules) != 1 || len(route.Spec.Rules[0].BackendRefs) != 1 {
		t.Fatalf("want one rule with one backend: %+v", route.Spec.Rules)
	}
	be := route.Spec.Rules[0].BackendRefs[0]
	if be.Group == nil || string(*be.Group) != giev1.GroupName || be.Kind == nil || string(*be.Kind) != "InferencePool" || string(be.Name) != pool.Name {
		t.Errorf("the HTTPRoute's backend %+v is not the rendered InferencePool %s", be.BackendObjectReference, pool.Name)
	}

	for _, c := range []struct {
		doc, name string
		kind      engineKind
	}{
		{quickstartVLLM, "vllm-deployment", vllmEngine},
		{quickstartSGLang, "sglang-deployment", sglangEngine},
	} {
		t.Run(c.kind.name, func(t *testing.T) {
			dep, ok := decode(c.doc, c.name).(*appsv1.Deployment)
			if !ok || len(dep.Spec.Template.Spec.Containers) != 1 {
				t.Fatalf("the %s block is not a one-container Deployment", c.name)
			}
			if dep.Namespace != route.Namespace {
				t.Errorf("engines in %q, the route and kvgate in %q: a pool selects pods of its own namespace", dep.Namespace, route.Namespace)
			}
			for k, v := range pool.Spec.Selector.MatchLabels {
				if dep.Spec.Template.Labels[string(k)] != string(v) {
					t.Errorf("the pool selects %s=%s; the engines' pods are labelled %v", k, v, dep.Spec.Template.Labels)
				}
			}
			ctr := dep.Spec.Template.Spec.Containers[0]
			side := checkEngineFlags(t, c.kind, engineFlags(ctr.Args))
			if len(pool.Spec.TargetPorts) != 1 || int(pool.Spec.TargetPorts[0].Number) != side.httpPort {
				t.Errorf("the pool's target ports %v; the engine serves on %d", pool.Spec.TargetPorts, side.httpPort)
			}
			declared := map[int32]bool{}
			for _, p := range ctr.Ports {
				declared[p.ContainerPort] = true
			}
			for _, p := range []int{side.httpPort, side.eventsPort, side.replayPort} {
				if !declared[int32(p)] {
					t.Errorf("container port %d not declared (%v)", p, ctr.Ports)
				}
			}
			if ip.EventsPort != side.eventsPort || ip.ReplayPort != side.replayPort || ip.Model != side.served {
				t.Errorf("inference_pool events %d replay %d model %q; the engine publishes on %d, replays on %d, serves %q",
					ip.EventsPort, ip.ReplayPort, ip.Model, side.eventsPort, side.replayPort, side.served)
			}
			if m := cfg.Models[0]; m.Name != side.served || m.BlockSize != side.blockSize {
				t.Errorf("models[0] %s block_size %d; the engine serves %q in blocks of %d", m.Name, m.BlockSize, side.served, side.blockSize)
			}
		})
	}
}

// Every values file a user may start from gives each model a tokenizer
// directory on a volume the extproc mounts: without one the extproc exits
// at start (issue 32: values-istio.yaml had none).
func TestValuesModelsHaveMountedTokenizers(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			objs := decodeAll(t, mustRender(t, sc, nil))
			cfg, err := config.Parse(strings.NewReader(renderedConfig(t, objs)))
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Models) == 0 {
				return // the defaults: nothing served yet
			}
			extproc := container(t, objs, "extproc")
			for _, m := range cfg.Models {
				if m.Tokenizer == "" {
					t.Errorf("model %s has no tokenizer", m.Name)
					continue
				}
				if !slices.ContainsFunc(extproc.VolumeMounts, func(v corev1.VolumeMount) bool { return strings.HasPrefix(m.Tokenizer, v.MountPath+"/") }) {
					t.Errorf("model %s: tokenizer %s is on no volume the extproc mounts", m.Name, m.Tokenizer)
				}
			}
		})
	}
}
