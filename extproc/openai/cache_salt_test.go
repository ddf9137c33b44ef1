package openai

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// cache_salt is read from both request kinds; null is absent; anything
// but a non-empty string is refused as vLLM refuses it.
func TestCacheSalt(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"model":"m","prompt":"hi","cache_salt":"tenant-a"}`, "tenant-a"},
		{`{"model":"m","prompt":"hi","cache_salt":null}`, ""},
		{`{"model":"m","prompt":"hi"}`, ""},
	} {
		r, err := ParseCompletion([]byte(c.body), Limits{})
		if err != nil || r.CacheSalt != c.want {
			t.Fatalf("completion %s: salt %q, err %v; want %q", c.body, r.CacheSalt, err, c.want)
		}
		chat := strings.Replace(c.body, `"prompt":"hi"`, `"messages":[{"role":"user","content":"hi"}]`, 1)
		cr, err := ParseChat([]byte(chat), Limits{})
		if err != nil || cr.CacheSalt != c.want {
			t.Fatalf("chat %s: salt %q, err %v; want %q", chat, cr.CacheSalt, err, c.want)
		}
	}
	for _, bad := range []string{`""`, `7`, `["a"]`} {
		_, err := ParseChat([]byte(`{"model":"m","messages":[],"cache_salt":`+bad+`}`), Limits{})
		var oe *Error
		if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Param != "cache_salt" ||
			!strings.Contains(oe.Message, "must be a non-empty string") {
			t.Fatalf("cache_salt %s: %#v", bad, err)
		}
	}
}
