package kvfleet

import "testing"

func TestParseRole(t *testing.T) {
	for in, want := range map[string]Role{"": RoleBoth, "both": RoleBoth, "prefill": RolePrefill, "decode": RoleDecode} {
		got, err := ParseRole(in)
		if err != nil || got != want {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"router", "Prefill", " both"} {
		if _, err := ParseRole(bad); err == nil {
			t.Errorf("ParseRole(%q) accepted", bad)
		}
	}
	for _, r := range []Role{RoleBoth, RolePrefill, RoleDecode} {
		if back, err := ParseRole(r.String()); err != nil || back != r {
			t.Errorf("ParseRole(%v.String()) = %v, %v", r, back, err)
		}
	}
}

func TestWorkerApproximate(t *testing.T) {
	if !(Worker{}).Approximate() {
		t.Error("a worker without events must be approximate")
	}
	if (Worker{Events: EventsBindMode}).Approximate() {
		t.Error("a bind-mode worker publishes events")
	}
}
