package envoyharness

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func raw(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

func TestApplyHeaderMutationRules(t *testing.T) {
	base := []Header{{":method", "POST"}, {":path", "/a"}, {":authority", "h"}, {"host", "h"}, {"x-a", "1"}, {"x-a", "2"}, {"x-envoy-x", "e"}}
	cases := []struct {
		name    string
		m       *extprocv3.HeaderMutation
		want    []Header
		skipped int
		err     string
	}{
		{"overwrite_by_default", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{raw("x-a", "9")}},
			[]Header{{":method", "POST"}, {":path", "/a"}, {":authority", "h"}, {"host", "h"}, {"x-a", "9"}, {"x-envoy-x", "e"}}, 0, ""},
		{"append_field", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", RawValue: []byte("3")}, Append: wrapperspb.Bool(true)}}},
			append(append([]Header(nil), base...), Header{"x-a", "3"}), 0, ""},
		{"add_if_absent_present", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", RawValue: []byte("3")}, AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT}}},
			base, 0, ""},
		{"overwrite_if_exists_absent", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-new", RawValue: []byte("3")}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS}}},
			base, 0, ""},
		{"routing_and_envoy_headers_ignored", &extprocv3.HeaderMutation{
			SetHeaders:    []*corev3.HeaderValueOption{raw(":method", "GET"), raw(":authority", "evil"), raw("host", "evil"), raw("x-envoy-x", "z"), raw(":scheme", "https")},
			RemoveHeaders: []string{":path", "host", "x-envoy-x"}},
			base, 8, ""},
		{"path_may_change", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{raw(":path", "/b")}},
			[]Header{{":method", "POST"}, {":path", "/b"}, {":authority", "h"}, {"host", "h"}, {"x-a", "1"}, {"x-a", "2"}, {"x-envoy-x", "e"}}, 0, ""},
		{"remove_then_set", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{raw("x-a", "5")}, RemoveHeaders: []string{"X-A"}},
			[]Header{{":method", "POST"}, {":path", "/a"}, {":authority", "h"}, {"host", "h"}, {"x-envoy-x", "e"}, {"x-a", "5"}}, 0, ""},
		{"value_only_is_empty", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-v", Value: "text"}}}},
			append(append([]Header(nil), base...), Header{"x-v", ""}), 0, ""},
		{"value_and_raw_value", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-v", Value: "a", RawValue: []byte("b")}}}},
			nil, 0, "both value and raw_value"},
		{"crlf_value", &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{raw("x-v", "a\r\nb: c")}}, nil, 0, "invalid character"},
		{"bad_remove_name", &extprocv3.HeaderMutation{RemoveHeaders: []string{"bad name"}}, nil, 0, "invalid character"},
		{"too_many_sets", &extprocv3.HeaderMutation{SetHeaders: make([]*corev3.HeaderValueOption, 101)}, nil, 0, "exceed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, skipped, err := applyHeaderMutation(base, c.m)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if skipped != c.skipped {
				t.Errorf("skipped %d, want %d", skipped, c.skipped)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v\nwant %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("got %v\nwant %v", got, c.want)
				}
			}
		})
	}
	if base[4].Value != "1" || len(base) != 7 {
		t.Error("input slice modified")
	}
}
