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

func TestZMQEndpoint(t *testing.T) {
	ok := []struct {
		ep   string
		rank int
		want string
		port int
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", 5557},
		{"tcp://*:5557", 3, "tcp://*:5560", 5560},
		{"tcp://engine-0:5558", 1, "tcp://engine-0:5559", 5559},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559", 5559},
		{"tcp://host:65534", 1, "tcp://host:65535", 65535},
	}
	for _, c := range ok {
		got, port, err := ZMQEndpoint(c.ep, c.rank)
		if err != nil || got != c.want || port != c.port {
			t.Errorf("ZMQEndpoint(%q, %d) = %q, %d, %v; want %q, %d", c.ep, c.rank, got, port, err, c.want, c.port)
		}
	}
	bad := []struct {
		ep   string
		rank int
	}{
		{"ipc:///tmp/kv", 0}, // the fleet's engines and kvagents publish on TCP
		{"tcp://host", 1},
		{"tcp://host:x", 1},
		{"tcp://host:0", 0},
		{"tcp://host:65535", 1},
		{"tcp://host:5557", -1},
		{"tcp://host:5557/path", 0},
		{"", 0},
	}
	for _, c := range bad {
		if got, _, err := ZMQEndpoint(c.ep, c.rank); err == nil {
			t.Errorf("ZMQEndpoint(%q, %d) = %q, want an error", c.ep, c.rank, got)
		}
	}
}
