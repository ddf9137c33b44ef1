package simulate

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
)

func TestP3Probe(t *testing.T) {
	cfg := Config{}.withDefaults()
	prof, err := ProfileFromTimingModel(cfg.Engine)
	if err != nil {
		t.Fatal(err)
	}
	m := perfmodel.MustNew(prof)
	for _, tt := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
		fmt.Println("prefill tps 3000 @", tt, m.PrefillThroughput(3000, tt))
	}
	fmt.Println("decode tps ctx 3075 @50ms", m.DecodeThroughput(3075, 50*time.Millisecond))
	for _, p := range prof.Prefill {
		if p.InputTokens >= 2000 && p.InputTokens <= 4096 {
			fmt.Printf("%+v\n", p)
		}
	}
}
