package openai

import (
	"errors"
	"testing"
)

func TestSetField(t *testing.T) {
	cases := []struct {
		name, body, key, raw, want string
	}{
		{"replace keeps other bytes", "{ \"a\" : 1 ,\n \"kv_transfer_params\" : {\"x\": 1} , \"z\":[ 2 ] }", "kv_transfer_params", `{"do_remote_decode":true}`,
			"{ \"a\" : 1 ,\n \"kv_transfer_params\" : {\"do_remote_decode\":true} , \"z\":[ 2 ] }"},
		{"append", `{"a": 1}`, "k", `[1, 2]`, `{"a": 1,"k":[1, 2]}`},
		{"append to empty", `{ }`, "k", `null`, `{ "k":null}`},
		{"append with trailing space", "{\"a\":1}\n", "k", ` "v" `, "{\"a\":1,\"k\":\"v\"}\n"},
		{"duplicate key replaces the last", `{"k":1,"k":2}`, "k", `3`, `{"k":1,"k":3}`},
		{"nested key untouched", `{"o":{"k":1}}`, "k", `2`, `{"o":{"k":1},"k":2}`},
		{"escaped key matches", `{"\u006b":1}`, "k", `2`, `{"\u006b":2}`},
	}
	for _, c := range cases {
		got, err := SetField([]byte(c.body), c.key, []byte(c.raw), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestSetFieldRejects(t *testing.T) {
	cases := []struct{ body, raw, message string }{
		{`{"a":1}`, `{`, "k: invalid JSON at byte 1: expected a string key"},
		{`{"a":1}`, `1 2`, "k: invalid JSON at byte 2: unexpected data after the top-level value"},
		{`{"a":1}`, ``, "k: invalid JSON at byte 0: unexpected end of input"},
		{`[1]`, `1`, "request body must be a JSON object"},
		{`{"a":}`, `1`, "a: invalid JSON at byte 5: unexpected character '}'"},
	}
	for _, c := range cases {
		_, err := SetField([]byte(c.body), "k", []byte(c.raw), Limits{})
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Message != c.message {
			t.Errorf("SetField(%s, %s) = %v, want 400 %q", c.body, c.raw, err, c.message)
		}
	}
}
