//go:build helm || kubeapiserver

package deploy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// secretValue is what the tests put in a Secret's key: the value the env
// var of the same Secret gets (renderedConfig), so a password read from a
// file equals the one the in-chart Redis is started with. It is longer
// than secretfiles.MinAdminTokenBytes, so it serves as an admin token too.
func secretValue(secret string) string { return "from-secret-" + secret }

var (
	testCAOnce sync.Once
	testCA     *tlstest.CA
	testCAErr  error
)

// secretFiles writes, for every Secret volume mounted in a kvgate
// container, the files the kubelet would project (items' paths) into a
// temporary directory, and returns mount path → directory. TLS keys get
// a certificate and key issued by one test CA (ca.crt is that CA); any
// other key gets secretValue.
func secretFiles(t *testing.T, objs map[string]runtime.Object) map[string]string {
	t.Helper()
	testCAOnce.Do(func() { testCA, testCAErr = tlstest.NewCA("kvgate chart test CA") })
	if testCAErr != nil {
		t.Fatal(testCAErr)
	}
	out := map[string]string{}
	image := kvgateImage(objs)
	for _, w := range workloads(objs) {
		vols := map[string]corev1.Volume{}
		for _, v := range w.template.Spec.Volumes {
			vols[v.Name] = v
		}
		for _, c := range w.template.Spec.Containers {
			if c.Image != image {
				continue
			}
			for _, m := range c.VolumeMounts {
				v, ok := vols[m.Name]
				if !ok || v.Secret == nil || out[m.MountPath] != "" {
					continue
				}
				dir := t.TempDir()
				writeSecretVolume(t, dir, v.Secret)
				out[m.MountPath] = dir
			}
		}
	}
	return out
}

func writeSecretVolume(t *testing.T, dir string, s *corev1.SecretVolumeSource) {
	t.Helper()
	items := s.Items
	if len(items) == 0 {
		t.Fatalf("Secret volume %s projects every key: the chart lists items so the file names do not depend on the Secret", s.SecretName)
	}
	var leaf tlstest.Files
	for _, it := range items {
		path := filepath.Join(dir, it.Path)
		var b []byte
		switch it.Key {
		case "tls.crt", "tls.key":
			if leaf.Cert == "" {
				l, err := testCA.Peer(s.SecretName, "127.0.0.1", "localhost")
				if err != nil {
					t.Fatal(err)
				}
				if leaf, err = l.Write(t.TempDir(), "leaf"); err != nil {
					t.Fatal(err)
				}
			}
			src := leaf.Cert
			if it.Key == "tls.key" {
				src = leaf.Key
			}
			var err error
			if b, err = os.ReadFile(src); err != nil {
				t.Fatal(err)
			}
		case "ca.crt":
			b = testCA.CertPEM
		default:
			b = []byte(secretValue(s.SecretName) + "\n")
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// configFiles lists the file paths a kvgate config names (keys ending in
// _file), with their key paths.
func configFiles(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if s, ok := sub.(string); ok && strings.HasSuffix(k, "_file") && s != "" {
				out[p] = s
				continue
			}
			configFiles(p, sub, out)
		}
	case []any:
		for i, sub := range x {
			configFiles(prefix+"["+strconv.Itoa(i)+"]", sub, out)
		}
	}
}
