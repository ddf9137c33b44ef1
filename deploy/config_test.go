//go:build helm || kubeapiserver

package deploy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kvgate/kvgate/config"
)

const (
	configDir  = "/etc/kvgate"
	configKey  = "config.yaml"
	configFlag = "--config=" + configDir + "/" + configKey
)

// renderedConfig returns the kvgate config file in the chart's ConfigMap as
// the pods would read it: every env var the pods get from Secrets is set
// (for the test), and every Secret volume mounted in a kvgate container is
// written to a temporary directory that replaces its mount path in the
// config (see secretFiles), since config validation reads the files.
func renderedConfig(t *testing.T, objs map[string]runtime.Object) string {
	t.Helper()
	var data []string
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.HasSuffix(cm.Name, "-config") {
			data = append(data, cm.Data[configKey])
		}
	}
	if len(data) != 1 {
		t.Fatalf("want one kvgate ConfigMap with key %s, found %d", configKey, len(data))
	}
	for _, w := range workloads(objs) {
		for _, c := range w.template.Spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					t.Setenv(e.Name, "from-secret-"+e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
	}
	cfg := data[0]
	for mountPath, dir := range secretFiles(t, objs) {
		cfg = strings.ReplaceAll(cfg, mountPath+"/", dir+"/")
	}
	return cfg
}

// The ConfigMap holds a config the real parser (strict, validating)
// accepts, and every kvgate container reads exactly that file.
func TestConfigMapParses(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			objs := decodeAll(t, mustRender(t, sc, nil))
			cfg, err := config.Parse(strings.NewReader(renderedConfig(t, objs)))
			if err != nil {
				t.Fatalf("config.Parse rejects the rendered config: %v", err)
			}
			if cfg.Extproc.Listen != ":9002" {
				t.Errorf("extproc.listen = %q, want :9002 (the pod IP, for the gateways)", cfg.Extproc.Listen)
			}
			for _, w := range workloads(objs) {
				for _, c := range w.template.Spec.Containers {
					if c.Image != kvgateImage(objs) {
						continue
					}
					if !containsString(c.Args, configFlag) {
						t.Errorf("%s container %s: args %v lack %s", w.name, c.Name, c.Args, configFlag)
					}
					if !mountsConfig(w.template.Spec, c) {
						t.Errorf("%s container %s: does not mount the kvgate ConfigMap at %s", w.name, c.Name, configDir)
					}
				}
			}
		})
	}
}

// Without metrics, the extproc admin listener (metrics and /debug/decisions)
// stays on loopback and the pod declares no admin port; with metrics it is
// on the pod IP (and the NetworkPolicy test covers who may reach it).
func TestExtprocAdminOnLoopbackWithoutMetrics(t *testing.T) {
	for _, metrics := range []bool{false, true} {
		objs := decodeAll(t, mustRender(t, "", map[string]any{"metrics": map[string]any{"enabled": metrics}}))
		cfg, err := config.Parse(strings.NewReader(renderedConfig(t, objs)))
		if err != nil {
			t.Fatal(err)
		}
		loopback := strings.HasPrefix(cfg.Extproc.Admin, "127.0.0.1:")
		if loopback == metrics {
			t.Errorf("metrics.enabled=%v: extproc.admin = %q", metrics, cfg.Extproc.Admin)
		}
		for _, w := range workloads(objs) {
			for _, c := range w.template.Spec.Containers {
				for _, p := range c.Ports {
					if p.Name == "admin" && !metrics {
						t.Errorf("metrics.enabled=false: %s declares the admin port", w.name)
					}
				}
			}
		}
	}
}

// A typo under config reaches the strict parser and is reported with its
// key, so the chart cannot ship a config the processes would refuse.
func TestConfigTypoRejected(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "", map[string]any{"config": map[string]any{"extproc": map[string]any{"polcy": "kvgate"}}}))
	_, err := config.Parse(strings.NewReader(renderedConfig(t, objs)))
	if err == nil || !strings.Contains(err.Error(), "polcy") {
		t.Fatalf("config with extproc.polcy: got %v, want an error naming the key", err)
	}
}

func kvgateImage(objs map[string]runtime.Object) string {
	for _, w := range workloads(objs) {
		if w.template.Labels["app.kubernetes.io/component"] == "extproc" {
			return w.template.Spec.Containers[0].Image
		}
	}
	return ""
}

func mountsConfig(spec corev1.PodSpec, c corev1.Container) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath != configDir {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && strings.HasSuffix(v.ConfigMap.Name, "-config") {
				return true
			}
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
