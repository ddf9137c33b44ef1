//go:build helm || kubeapiserver

package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The container args must name real subcommands and flags of the kvgate
// binary built from this tree: the chart is checked against the binary's
// own usage output, not a list kept by hand.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

func kvgateBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := makeTempDir()
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "kvgate")
		out, err := exec.Command(goBin, "build", "-o", builtBin, "github.com/kvgate/kvgate/cmd/kvgate").CombinedOutput()
		if err != nil {
			buildErr = err
			builtBin = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building kvgate: %v\n%s", buildErr, builtBin)
	}
	return builtBin
}

// usage runs the binary with args and returns everything it printed.
func usage(bin string, args ...string) string {
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // exit status differs per subcommand for --help; the text is what counts
	return out.String()
}

var (
	commandLine = regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)\s`)
	flagLine    = regexp.MustCompile(`(?m)^\s+--?([a-zA-Z0-9][a-zA-Z0-9-]*)\b`)
)

func TestContainerArgsAreRealCommandsAndFlags(t *testing.T) {
	bin := kvgateBinary(t)
	commands := map[string]bool{}
	for _, m := range commandLine.FindAllStringSubmatch(usage(bin, "help"), -1) {
		commands[m[1]] = true
	}
	if !commands["extproc"] || !commands["indexer"] {
		t.Fatalf("`kvgate help` lists no extproc/indexer; parsed %v", commands)
	}
	flags := map[string]map[string]bool{}
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			objs := decodeAll(t, mustRender(t, sc, nil))
			image := kvgateImage(objs)
			checked := 0
			for _, w := range workloads(objs) {
				for _, c := range append(w.template.Spec.InitContainers, w.template.Spec.Containers...) {
					if c.Image != image {
						continue
					}
					if len(c.Command) != 0 {
						t.Errorf("%s container %s: sets command; the image's entrypoint is kvgate", w.name, c.Name)
					}
					if len(c.Args) == 0 || !commands[c.Args[0]] {
						t.Errorf("%s container %s: args %v do not start with a kvgate subcommand (have %v)", w.name, c.Name, c.Args, keys(commands))
						continue
					}
					sub := c.Args[0]
					if flags[sub] == nil {
						flags[sub] = map[string]bool{}
						for _, m := range flagLine.FindAllStringSubmatch(usage(bin, sub, "--help"), -1) {
							flags[sub][m[1]] = true
						}
					}
					for _, a := range c.Args[1:] {
						if !strings.HasPrefix(a, "-") {
							t.Errorf("%s container %s: positional argument %q", w.name, c.Name, a)
							continue
						}
						name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
						if !flags[sub][name] {
							t.Errorf("%s container %s: `kvgate %s` has no flag %q (it has %v)", w.name, c.Name, sub, name, keys(flags[sub]))
						}
					}
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("no kvgate containers checked")
			}
		})
	}
}

// The image runs as the uid the chart's pods declare and its entrypoint is
// the kvgate binary (so container args start with the subcommand).
func TestDockerfileMatchesChart(t *testing.T) {
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var user, entrypoint, from string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			from, user, entrypoint = f[1], "", "" // the last stage is the image
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			entrypoint = strings.Join(f[1:], " ")
		}
	}
	if !strings.HasPrefix(from, "gcr.io/distroless/static") {
		t.Errorf("runtime stage FROM %s: want distroless/static (no shell, no libc)", from)
	}
	objs := decodeAll(t, mustRender(t, "", nil))
	var uid int64 = -1
	for _, w := range workloads(objs) {
		if sc := w.template.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
	}
	if want := fmt.Sprintf("%d:%d", uid, uid); user != want {
		t.Errorf("Dockerfile USER %q, want %q (the chart's runAsUser)", user, want)
	}
	if entrypoint != `["/usr/local/bin/kvgate"]` {
		t.Errorf("ENTRYPOINT %s: want the kvgate binary alone", entrypoint)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
