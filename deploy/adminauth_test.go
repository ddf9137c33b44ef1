//go:build helm || kubeapiserver

package deploy

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/envoy"
	"github.com/kvgate/kvgate/internal/confaddr"
)

const (
	tokenSecretName = releaseName + "-admin-token"
	tokenMountDir   = "/var/run/secrets/kvgate/admin"
)

// rawConfig is the ConfigMap's config file as rendered (mount paths not
// substituted), decoded as plain YAML.
func rawConfig(t *testing.T, objs map[string]runtime.Object) map[string]any {
	t.Helper()
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.HasSuffix(cm.Name, "-config") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(cm.Data[configKey]), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatal("no kvgate ConfigMap")
	return nil
}

// componentSpec returns the pod spec and kvgate container of a component,
// or false when it is not rendered.
func componentSpec(objs map[string]runtime.Object, component string) (corev1.PodSpec, corev1.Container, bool) {
	for _, w := range workloads(objs) {
		if w.template.Labels["app.kubernetes.io/component"] == component {
			return w.template.Spec, w.template.Spec.Containers[0], true
		}
	}
	return corev1.PodSpec{}, corev1.Container{}, false
}

// mountedSecretFile reports the Secret and key a container sees at path
// (a file of a Secret volume mounted at the path's directory), or "".
func mountedSecretFile(spec corev1.PodSpec, c corev1.Container, path string) (secret, key string) {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, m.MountPath+"/") {
			continue
		}
		file := strings.TrimPrefix(path, m.MountPath+"/")
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == file {
					return v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return "", ""
}

// Every file the config names (token, password, certificates) is a
// projected key of a Secret volume that the container reading it mounts.
func TestConfigFilesAreMounted(t *testing.T) {
	readers := map[string]string{"extproc": "extproc", "indexer": "indexer", "index": "", "kvagent": "kvagent", "planner": "planner"}
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			objs := decodeAll(t, mustRender(t, sc, nil))
			files := map[string]string{}
			configFiles("", rawConfig(t, objs), files)
			for key, path := range files {
				section := strings.SplitN(key, ".", 2)[0]
				component, ok := readers[section]
				if !ok {
					t.Errorf("%s: %s in a section no chart workload reads", key, path)
					continue
				}
				var components []string
				if component != "" {
					components = []string{component}
				} else { // index.*: every process that opens the index
					components = []string{"extproc", "indexer"}
				}
				for _, comp := range components {
					spec, c, rendered := componentSpec(objs, comp)
					if !rendered {
						continue
					}
					if s, k := mountedSecretFile(spec, c, path); s == "" || k == "" {
						t.Errorf("%s: %s = %s is not a Secret file mounted in the %s container", scenarioName(sc), key, path, comp)
					}
				}
			}
		})
	}
}

// adminListeners are the admin address keys of the config and the chart
// component serving each.
var adminListeners = []struct{ section, addrKey, component string }{
	{"extproc", "admin", "extproc"},
	{"indexer", "listen", "indexer"},
	{"kvagent", "admin", "kvagent"},
	{"planner", "admin", "planner"},
}

// monitorAuth returns each rendered monitor endpoint's authorization, by
// "Kind/name".
func monitorAuth(objs map[string]runtime.Object) map[string]*monitoringv1.SafeAuthorization {
	out := map[string]*monitoringv1.SafeAuthorization{}
	for _, o := range objs {
		switch m := o.(type) {
		case *monitoringv1.ServiceMonitor:
			for _, e := range m.Spec.Endpoints {
				out["ServiceMonitor/"+m.Name] = e.Authorization
			}
		case *monitoringv1.PodMonitor:
			for _, e := range m.Spec.PodMetricsEndpoints {
				out["PodMonitor/"+m.Name] = e.Authorization
			}
		}
	}
	return out
}

// With the defaults of adminAuth, every admin listener bound beyond
// loopback has admin_auth.token_file at the mounted token, the token
// Secret is rendered with a usable token, and every monitor sends it.
func TestAdminAuthWiring(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			ms := mustRender(t, sc, nil)
			objs := decodeAll(t, ms)
			cfg := rawConfig(t, objs)
			exposed := 0
			for _, l := range adminListeners {
				sec, _ := cfg[l.section].(map[string]any)
				addr, _ := sec[l.addrKey].(string)
				spec, c, rendered := componentSpec(objs, l.component)
				if !rendered || addr == "" || confaddr.IsLoopback(addr) {
					if rendered && addr != "" && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "admin-token" }) {
						t.Errorf("%s: admin on loopback but the token is mounted (least privilege)", l.component)
					}
					continue
				}
				exposed++
				auth, _ := sec["admin_auth"].(map[string]any)
				tf, _ := auth["token_file"].(string)
				if tf != tokenMountDir+"/token" {
					t.Errorf("%s.%s = %q (beyond loopback): admin_auth %v, want token_file %s/token", l.section, l.addrKey, addr, auth, tokenMountDir)
					continue
				}
				if s, k := mountedSecretFile(spec, c, tf); s != tokenSecretName || k != "token" {
					t.Errorf("%s: %s comes from Secret %q key %q, want %s key token", l.component, tf, s, k, tokenSecretName)
				}
			}
			if exposed == 0 {
				t.Fatal("no admin listener beyond loopback in this scenario")
			}
			var secret *corev1.Secret
			for _, o := range objs {
				if s, ok := o.(*corev1.Secret); ok && s.Name == tokenSecretName {
					secret = s
				}
			}
			if secret == nil {
				t.Fatalf("no Secret %s rendered", tokenSecretName)
			}
			tok := string(secret.Data["token"])
			if len(tok) != 40 || strings.Trim(tok, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
				t.Errorf("generated token %q: want 40 alphanumerics", tok)
			}
			for name, a := range monitorAuth(objs) {
				if a == nil || !strings.EqualFold(a.Type, "Bearer") || a.Credentials == nil || a.Credentials.Name != tokenSecretName || a.Credentials.Key != "token" {
					t.Errorf("%s: authorization %+v, want Bearer from Secret %s key token", name, a, tokenSecretName)
				}
			}
		})
	}
}

// Rendering without a cluster (helm template, --dry-run) cannot look up
// the existing Secret, so each render makes a fresh token: the documented
// reason template-based GitOps must set adminAuth.existingSecret.
func TestAdminTokenFreshWithoutLookup(t *testing.T) {
	token := func() string {
		for _, o := range decodeAll(t, mustRender(t, "", nil)) {
			if s, ok := o.(*corev1.Secret); ok && s.Name == tokenSecretName {
				return string(s.Data["token"])
			}
		}
		t.Fatalf("no Secret %s", tokenSecretName)
		return ""
	}
	if a, b := token(), token(); a == b {
		t.Errorf("two renders without a cluster gave the same token %q", a)
	}
}

// adminAuth.existingSecret: no Secret rendered, the user's Secret and key
// are mounted and sent by the monitors.
func TestAdminTokenExistingSecret(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "testdata/values-full.yaml", map[string]any{"adminAuth": map[string]any{"existingSecret": "ops-admin-token", "key": "bearer"}}))
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			t.Errorf("Secret %s rendered, want none with existingSecret", s.Name)
		}
	}
	spec, c, _ := componentSpec(objs, "indexer")
	if s, k := mountedSecretFile(spec, c, tokenMountDir+"/token"); s != "ops-admin-token" || k != "bearer" {
		t.Errorf("indexer token from Secret %q key %q, want ops-admin-token key bearer", s, k)
	}
	auths := monitorAuth(objs)
	if len(auths) != 8 {
		t.Errorf("%d monitors, want 8 (4 components × ServiceMonitor and PodMonitor)", len(auths))
	}
	for name, a := range auths {
		if a == nil || a.Credentials == nil || a.Credentials.Name != "ops-admin-token" || a.Credentials.Key != "bearer" {
			t.Errorf("%s: authorization %+v, want Secret ops-admin-token key bearer", name, a)
		}
	}
	if _, err := config.Parse(strings.NewReader(renderedConfig(t, objs))); err != nil {
		t.Errorf("config with the user's Secret: %v", err)
	}
}

// adminAuth.enabled=false: exposed listeners say allow_unauthenticated
// (the config parses), nothing mounts a token, monitors send none.
func TestAdminAuthOff(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "testdata/values-full.yaml", map[string]any{"adminAuth": map[string]any{"enabled": false}}))
	cfg := rawConfig(t, objs)
	for _, l := range adminListeners {
		sec, _ := cfg[l.section].(map[string]any)
		auth, _ := sec["admin_auth"].(map[string]any)
		if auth["allow_unauthenticated"] != true || auth["token_file"] != nil {
			t.Errorf("%s.admin_auth = %v, want allow_unauthenticated only", l.section, auth)
		}
		if _, c, ok := componentSpec(objs, l.component); ok && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "admin-token" }) {
			t.Errorf("%s mounts a token with adminAuth off", l.component)
		}
	}
	for name, a := range monitorAuth(objs) {
		if a != nil {
			t.Errorf("%s sends authorization %+v with adminAuth off", name, a)
		}
	}
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			t.Errorf("Secret %s rendered with adminAuth off", s.Name)
		}
	}
	if _, err := config.Parse(strings.NewReader(renderedConfig(t, objs))); err != nil {
		t.Errorf("config: %v", err)
	}
}

// extproc.tls: the Secret is mounted where extproc.tls points (with ca.crt
// for client certificates), the probes move to the admin port over HTTP
// (the kubelet's gRPC probes are plaintext), the admin port is declared
// and tokened even without metrics, and the config loads real files.
func TestExtprocTLSWiring(t *testing.T) {
	for _, mtls := range []bool{false, true} {
		objs := decodeAll(t, mustRender(t, "", map[string]any{
			"metrics": map[string]any{"enabled": false},
			"extproc": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "kvgate-extproc-tls", "requireClientCert": mtls, "minVersion": "1.3"}},
		}))
		cfg, err := config.Parse(strings.NewReader(renderedConfig(t, objs)))
		if err != nil {
			t.Fatalf("mTLS %v: config: %v", mtls, err)
		}
		x := cfg.Extproc.TLS
		if !x.Enabled() || x.RequireClientCert != mtls || (x.ClientCAFile != "") != mtls || x.MinVersion != "1.3" {
			t.Errorf("mTLS %v: extproc.tls %+v", mtls, x)
		}
		if tc, err := x.Load(); err != nil || tc == nil {
			t.Errorf("mTLS %v: extproc.tls does not load: %v", mtls, err)
		}
		if confaddr.IsLoopback(cfg.Extproc.Admin) || !cfg.Extproc.AdminAuth.Configured() {
			t.Errorf("mTLS %v: admin %q auth %+v: want the pod IP (probes) with the token", mtls, cfg.Extproc.Admin, cfg.Extproc.AdminAuth)
		}
		raw := rawConfig(t, objs)["extproc"].(map[string]any)["tls"].(map[string]any)
		spec, c, _ := componentSpec(objs, "extproc")
		want := map[string]string{"cert_file": "tls.crt", "key_file": "tls.key"}
		if mtls {
			want["client_ca_file"] = "ca.crt"
		}
		for k, key := range want {
			p, _ := raw[k].(string)
			if s, got := mountedSecretFile(spec, c, p); s != "kvgate-extproc-tls" || got != key {
				t.Errorf("mTLS %v: extproc.tls.%s = %s is Secret %q key %q, want kvgate-extproc-tls key %s", mtls, k, p, s, got, key)
			}
		}
		adminPort := int32(0)
		for _, p := range c.Ports {
			if p.Name == "admin" {
				adminPort = p.ContainerPort
			}
		}
		if adminPort != 9003 {
			t.Errorf("mTLS %v: admin port %d declared, want 9003", mtls, adminPort)
		}
		for name, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			wantPath := "/healthz"
			if name == "readiness" {
				wantPath = "/readyz"
			}
			if pr == nil || pr.GRPC != nil || pr.HTTPGet == nil || pr.HTTPGet.Path != wantPath || pr.HTTPGet.Port.StrVal != "admin" || pr.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				t.Errorf("mTLS %v: %s probe %+v, want httpGet %s on the admin port", mtls, name, pr, wantPath)
			}
		}
	}
	// Without TLS the probes stay gRPC health on the ext_proc port.
	_, c, _ := componentSpec(decodeAll(t, mustRender(t, "", nil)), "extproc")
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.ReadinessProbe.GRPC.Port != 9002 {
		t.Errorf("plaintext readiness probe %+v, want gRPC on 9002", c.ReadinessProbe)
	}
}

// Istio MUTUAL (kvgate requires gateway client certificates): the
// DestinationRule passes the mesh validator and names the credential and
// the Service's SNI.
func TestIstioMutualTLSToExtproc(t *testing.T) {
	ms := mustRender(t, "testdata/values-istio.yaml", map[string]any{
		"extproc": map[string]any{"tls": map[string]any{"requireClientCert": true}},
		"mesh":    map[string]any{"istio": map[string]any{"tls": map[string]any{"mode": "MUTUAL", "credentialName": "gateway-to-kvgate"}}},
	})
	data, _ := meshDocs(ms)
	if _, err := envoy.Validate(data); err != nil {
		t.Fatalf("mesh objects rejected: %v", err)
	}
	for _, m := range byKind(ms, "DestinationRule") {
		var dr struct {
			Spec struct {
				TrafficPolicy struct {
					TLS map[string]string `json:"tls"`
				} `json:"trafficPolicy"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(m.YAML, &dr); err != nil {
			t.Fatal(err)
		}
		tls := dr.Spec.TrafficPolicy.TLS
		if tls["mode"] != "MUTUAL" || tls["credentialName"] != "gateway-to-kvgate" || tls["sni"] != releaseName+"-extproc."+releaseNamespace+".svc" {
			t.Errorf("DestinationRule tls %v", tls)
		}
		return
	}
	t.Fatal("no DestinationRule rendered")
}
