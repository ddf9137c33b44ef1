package deploy

import (
	"os"
	"testing"
)

// chartDir is the Helm chart the tests read (docs_test.go untagged; the
// rendering tests, tagged helm, render it with Helm's own install action).
const chartDir = "helm/kvgate"

// tempRoot holds files shared by the tests (the built kvgate binary); it is
// removed when the tests end.
var tempRoot string

func makeTempDir() (string, error) {
	return os.MkdirTemp(tempRoot, "kvgate-bin-")
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvgate-deploy-test-")
	if err != nil {
		panic(err)
	}
	tempRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
