package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/indexer/blockhash"
)

func TestHashCLIPublishedVector(t *testing.T) {
	var out, errb bytes.Buffer
	code := dispatch([]string{"hash"}, strings.NewReader(`{"tokens":[1,2,3,4],"block_size":4}`), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != `{"local":[14643705804678351452],"sequence":[14643705804678351452]}` {
		t.Fatalf("got %s", got)
	}
}

func TestHashCLIBadInput(t *testing.T) {
	cases := map[string]string{
		``:                                         "empty input",
		`{"tokens":[1,2]}`:                         `missing field "block_size"`,
		`{"block_size":4}`:                         `missing field "tokens"`,
		`{"tokens":[1,-2],"block_size":4}`:         `field "tokens"`,
		`{"tokens":[1],"block_size":0}`:            "block_size must be",
		`{"tokens":[1],"block_size":4,"extra":1}`:  `unknown field "extra"`,
		`{"tokens":[1],"block_size":4} {}`:         "trailing data",
		`{"tokens":[1],"block_size":4,"lora":3}`:   `field "lora"`,
		`[1,2,3]`:                                  "want",
	}
	for in, want := range cases {
		var out, errb bytes.Buffer
		code := dispatch([]string{"hash"}, strings.NewReader(in), &out, &errb)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", in, code)
		}
		msg := errb.String()
		if !strings.Contains(msg, want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%q: error %q, want one line containing %q", in, msg, want)
		}
		if out.Len() != 0 {
			t.Errorf("%q: wrote to stdout on error: %q", in, out.String())
		}
	}
}

// FuzzHashInput checks that arbitrary stdin never crashes `kvgate hash` and
// that every accepted input hashes to what the library computes.
func FuzzHashInput(f *testing.F) {
	f.Add([]byte(`{"tokens":[1,2,3,4],"block_size":4}`))
	f.Add([]byte(`{"tokens":[1,2,3,4,5],"block_size":2,"lora":"a","namespace":"b"}`))
	f.Add([]byte(`{"tokens":[],"block_size":1}`))
	f.Add([]byte(`{"tokens":null,"block_size":65536}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out, errb bytes.Buffer
		code := dispatch([]string{"hash"}, bytes.NewReader(in), &out, &errb)
		switch code {
		case 0:
			var res blockhash.Result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("accepted input produced bad JSON %q: %v", out.String(), err)
			}
			if len(res.Local) != len(res.Sequence) {
				t.Fatalf("local/sequence length mismatch: %d vs %d", len(res.Local), len(res.Sequence))
			}
		case 2:
			if errb.Len() == 0 || strings.Count(errb.String(), "\n") != 1 {
				t.Fatalf("rejected input without a one-line error: %q", errb.String())
			}
		default:
			t.Fatalf("exit %d for %q", code, in)
		}
	})
}
