package config

import (
	"errors"
	"strings"
	"testing"
)

// Decode errors name the key path the user wrote, its line and, for a
// misspelt key, the closest real one (issue 17: yaml.v3 said "field
// block_sise not found in type config.Model").
func TestDecodeErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"models:\n  - name: m\n    block_sise: 16\n", `line 3: models[0].block_sise: unknown key (did you mean block_size?)`},
		{"models:\n  - name: m\n    block_size: sixteen\n", `line 3: models[0].block_size: want an integer, got "sixteen"`},
		{"extproc:\n  listen: 127.0.0.1:0\n  polcy: kvgate\n", `line 3: extproc.polcy: unknown key (did you mean policy?)`},
		{"extproc:\n  debug_header:\n    allow_any_client: yes please\n", `extproc.debug_header.allow_any_client: want true or false, got "yes please"`},
		{"index:\n  redis:\n    addrs: 127.0.0.1:6379\n", `line 3: index.redis.addrs: want a list, got "127.0.0.1:6379"`},
		{"index:\n  redis:\n    worker_ttl: soon\n", `line 3: index.redis.worker_ttl: bad duration "soon"`},
		{"index: [memory]\n", `line 1: index: want a mapping of keys, got a list`},
		{"totally_unknown: 1\n", `line 1: totally_unknown: unknown key`},
		{"engines:\n  - endpoint: a:1\n    dp_ranks: [2]\n", `line 3: engines[0].dp_ranks: want an integer, got a list`},
	} {
		_, err := Parse(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.in, err, c.want)
		}
		var de *DecodeError
		if !errors.As(err, &de) || de.Line == 0 || de.Path == "" {
			t.Errorf("%q: %v is not a *DecodeError with line and path", c.in, err)
		}
	}
}

// A far-off key gets no suggestion; several errors are all reported.
func TestDecodeErrorsSeveral(t *testing.T) {
	_, err := Parse(strings.NewReader("models:\n  - name: m\n    qqqqqq: 1\n    block_size: x\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	s := err.Error()
	if !strings.Contains(s, "models[0].qqqqqq: unknown key\n") && !strings.HasSuffix(s, "models[0].qqqqqq: unknown key") {
		t.Errorf("want the unknown key without a suggestion: %q", s)
	}
	if strings.Contains(s, "did you mean") {
		t.Errorf("suggested a key for qqqqqq: %q", s)
	}
	if !strings.Contains(s, "line 4: models[0].block_size: want an integer") {
		t.Errorf("second error missing: %q", s)
	}
}

// Valid documents pass the walk unchanged: the examples in the tests
// above and the good config decode.
func TestDecodeWalkAcceptsGood(t *testing.T) {
	if err := checkDocument([]byte(good)); err != nil {
		t.Fatal(err)
	}
	if err := checkDocument([]byte("")); err != nil {
		t.Fatal(err)
	}
}
