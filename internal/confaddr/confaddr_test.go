package confaddr

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9003": true, "127.1.2.3:9003": true, "[::1]:9003": true, "localhost:9003": true,
		":9003": false, "0.0.0.0:9003": false, "[::]:9003": false, "10.0.0.5:9003": false,
		"kvgate.internal:9003": false, "not-an-address": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
