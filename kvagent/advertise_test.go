package kvagent

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/kvagent/agentconfig"
)

// The transfer engine is advertised at advertise_host (or the listen
// host) with the bound port; a listener on every address without
// advertise_host is refused, naming the fix, rather than advertising an
// address peers cannot dial ("[::]:5701").
func TestListenTransferAdvertises(t *testing.T) {
	for _, c := range []struct {
		listen, host, want string
	}{
		{"127.0.0.1:0", "", "127.0.0.1:"},
		{"127.0.0.1:0", "10.1.2.3", "10.1.2.3:"},
		{"127.0.0.1:0", "fd00::7", "[fd00::7]:"},
		{":0", "node-a.gpu.internal", "node-a.gpu.internal:"},
	} {
		l, addr, err := listenTransfer(agentconfig.Peer{TransferListen: c.listen, AdvertiseHost: c.host})
		if err != nil {
			t.Fatalf("%s advertising %q: %v", c.listen, c.host, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !strings.HasPrefix(addr, c.want) || strings.TrimPrefix(addr, c.want) != fmt.Sprint(port) || port == 0 {
			t.Fatalf("%s advertising %q: %q (bound port %d), want %s<bound port>", c.listen, c.host, addr, port, c.want)
		}
	}
	for _, listen := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		if _, _, err := listenTransfer(agentconfig.Peer{TransferListen: listen}); err == nil || !strings.Contains(err.Error(), "advertise_host") {
			t.Fatalf("%s without advertise_host: %v, want an error naming advertise_host", listen, err)
		}
	}
}
