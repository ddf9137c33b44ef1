package kubeselect

import "testing"

func TestInferencePoolValidate(t *testing.T) {
	off := false
	ok := []InferencePool{
		{Name: "qwen-pool"},
		{Name: "qwen-pool", Namespace: "llm", Group: InferencePoolGroup, EventsPort: 5557, ReplayPort: 5600, Model: "qwen3"},
		{Name: "qwen-pool", Namespace: "llm", EventsPort: 65528, Objectives: &off, ModelLabel: "example.com/model"},
	}
	for _, p := range ok {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := map[string]InferencePool{
		"no name":        {Namespace: "llm"},
		"bad name":       {Name: "Qwen_Pool"},
		"bad namespace":  {Name: "p", Namespace: "LLM"},
		"other group":    {Name: "p", Group: "inference.networking.x-k8s.io"},
		"events past":    {Name: "p", EventsPort: 65529},
		"negative":       {Name: "p", EventsPort: -1},
		"replay alone":   {Name: "p", ReplayPort: 5600},
		"bad role label": {Name: "p", RoleLabel: "a/b/c"},
	}
	for name, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, p)
		}
	}
	if !(InferencePool{}).WatchObjectives() || (InferencePool{Objectives: &off}).WatchObjectives() {
		t.Error("objectives default on, off when set false")
	}
}
