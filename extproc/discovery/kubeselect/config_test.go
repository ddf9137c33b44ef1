package kubeselect

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := []Config{
		{Namespace: "llm", LabelSelector: "app=vllm", Port: 8000},
		{Namespace: "llm", LabelSelector: "app in (vllm, sglang),tier!=test", PortName: "http", EventsPort: 5557, ReplayPort: 5600, DPRanks: 8},
		{Namespace: "llm", Service: "vllm"},
		{Namespace: "llm", Service: "vllm", PortName: "http", ModelLabel: "example.com/model", ResyncPeriod: time.Minute},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := map[string]Config{
		"no namespace":   {LabelSelector: "app=vllm", Port: 8000},
		"bad namespace":  {Namespace: "LLM_", LabelSelector: "app=vllm", Port: 8000},
		"neither":        {Namespace: "llm", Port: 8000},
		"both":           {Namespace: "llm", LabelSelector: "app=vllm", Service: "vllm", Port: 8000},
		"bad selector":   {Namespace: "llm", LabelSelector: "app==(", Port: 8000},
		"pods no port":   {Namespace: "llm", LabelSelector: "app=vllm"},
		"bad service":    {Namespace: "llm", Service: "Vllm.svc"},
		"port range":     {Namespace: "llm", LabelSelector: "app=vllm", Port: 70000},
		"bad port name":  {Namespace: "llm", LabelSelector: "app=vllm", PortName: "http port"},
		"events+ranks":   {Namespace: "llm", Service: "vllm", EventsPort: 65535, DPRanks: 2},
		"replay alone":   {Namespace: "llm", Service: "vllm", ReplayPort: 5600},
		"negative ranks": {Namespace: "llm", Service: "vllm", DPRanks: -1},
		"bad label key":  {Namespace: "llm", Service: "vllm", RoleLabel: "a/b/c"},
		"neg resync":     {Namespace: "llm", Service: "vllm", ResyncPeriod: -time.Second},
		"huge debounce":  {Namespace: "llm", Service: "vllm", Debounce: time.Hour},
	}
	for name, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, c)
		}
	}
}
