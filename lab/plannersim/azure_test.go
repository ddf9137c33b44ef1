package plannersim

import (
	"strings"
	"testing"
	"time"
)

const azureHead = "TIMESTAMP,ContextTokens,GeneratedTokens\n"

func TestParseAzure(t *testing.T) {
	l, err := ParseAzure(strings.NewReader(azureHead+
		"2023-11-16 18:15:46.6805900,374,44\n"+
		"2023-11-16 18:15:50.9951690,396,109\n\n"+
		"2023-11-16 18:15:50.9951690,2,0\n"), "t.csv", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Arrival: 0, InputTokens: 374, OutputTokens: 44},
		{Arrival: 4314579 * time.Microsecond, InputTokens: 396, OutputTokens: 109},
		{Arrival: 4314579 * time.Microsecond, InputTokens: 2, OutputTokens: 1}, // 0 generated: one token is the least a request yields
	}
	if len(l.Requests) != len(want) {
		t.Fatalf("%d requests, want %d", len(l.Requests), len(want))
	}
	for i := range want {
		if l.Requests[i].Arrival != want[i].Arrival || l.Requests[i].InputTokens != want[i].InputTokens || l.Requests[i].OutputTokens != want[i].OutputTokens {
			t.Errorf("request %d = %+v, want %+v", i, l.Requests[i], want[i])
		}
	}
	if l, err := ParseAzure(strings.NewReader(azureHead+"2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:47,1,1\n"), "t.csv", 1); err != nil || len(l.Requests) != 1 {
		t.Errorf("limit 1: %d requests, %v", len(l.Requests), err)
	}
}

func TestParseAzureErrorsNameFileAndLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "t.csv: empty file"},
		{"a,b,c\n", "t.csv:1: header"},
		{azureHead, "t.csv: no requests"},
		{azureHead + "2023-11-16 18:15:46.68,1\n", "t.csv:2: 2 fields"},
		{azureHead + "yesterday,1,1\n", "t.csv:2: TIMESTAMP"},
		{azureHead + "2023-11-16 18:15:46.68,0,1\n", "t.csv:2: ContextTokens"},
		{azureHead + "2023-11-16 18:15:46.68,9999999999,1\n", "t.csv:2: ContextTokens"},
		{azureHead + "2023-11-16 18:15:46.68,5,-1\n", "t.csv:2: GeneratedTokens"},
		{azureHead + "2023-11-16 18:15:46.68,5,1\n2023-11-16 18:15:45,5,1\n", "t.csv:3: timestamp"},
		{azureHead + "2023-11-16 18:15:46.68,5,1\n" + strings.Repeat("x", MaxAzureLineBytes+1) + "\n", "t.csv:3: longer than"},
	} {
		_, err := ParseAzure(strings.NewReader(c.in), "t.csv", 0)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%.60q: error %v, want it to start with %q", c.in, err, c.want)
		}
	}
}

func TestLoadAzureSharedTrace(t *testing.T) {
	l, err := LoadAzure("testdata/AzureLLMInferenceTrace_conv.csv", 500)
	if err != nil {
		t.Fatalf("the shared Azure conversation trace: %v", err)
	}
	if len(l.Requests) != 500 || l.Validate() != nil {
		t.Errorf("%d requests, validate %v", len(l.Requests), l.Validate())
	}
}

func FuzzParseAzure(f *testing.F) {
	f.Add(azureHead + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
	f.Add(azureHead + "2023-11-16 18:15:46,1,0\n")
	f.Add(azureHead + "2023-11-16 18:15:46.68,5,1\n2023-11-16 18:15:45,5,1\n")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900 , 374 , 44\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		l, err := ParseAzure(strings.NewReader(in), "fuzz.csv", 0)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("parsed load does not validate: %v", err)
		}
	})
}
