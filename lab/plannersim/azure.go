package plannersim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// The Azure LLM inference trace 2023 (Azure/AzurePublicDataset,
// AzureLLMInferenceTrace_{conv,code}.csv) is a CSV with the header
// TIMESTAMP,ContextTokens,GeneratedTokens and one request per line, e.g.
// "2023-11-16 18:15:46.6805900,374,44" (UTC, 7 fractional digits).

// MaxAzureLineBytes bounds one CSV line; real lines are under 40 bytes.
const MaxAzureLineBytes = 4096

// azureTimeLayout parses the trace's timestamps with any number of
// fractional digits.
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// ParseAzure reads an Azure LLM inference trace CSV. name is used in
// messages ("name:line: ..."). limit > 0 stops after that many requests.
// Arrivals are relative to the first request; lines must be in time order.
func ParseAzure(r io.Reader, name string, limit int) (Load, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), MaxAzureLineBytes)
	l := Load{Name: name}
	line := 0
	var t0, last time.Time
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			if string(b) != "TIMESTAMP,ContextTokens,GeneratedTokens" {
				return Load{}, fmt.Errorf("%s:1: header %q: want TIMESTAMP,ContextTokens,GeneratedTokens", name, truncate(b))
			}
			continue
		}
		if len(b) == 0 {
			continue
		}
		if limit > 0 && len(l.Requests) >= limit {
			break
		}
		if len(l.Requests) >= MaxRequests {
			return Load{}, fmt.Errorf("%s:%d: more than %d requests", name, line, MaxRequests)
		}
		ts, in, out, err := parseAzureLine(b)
		if err != nil {
			return Load{}, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if len(l.Requests) == 0 {
			t0, last = ts, ts
		}
		if ts.Before(last) {
			return Load{}, fmt.Errorf("%s:%d: timestamp %s before the previous line's (want time order)", name, line, ts.Format(azureTimeLayout))
		}
		last = ts
		l.Requests = append(l.Requests, Request{Arrival: ts.Sub(t0), InputTokens: in, OutputTokens: max(1, out)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Load{}, fmt.Errorf("%s:%d: longer than %d bytes", name, line+1, MaxAzureLineBytes)
		}
		return Load{}, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if line == 0 {
		return Load{}, fmt.Errorf("%s: empty file (want the header TIMESTAMP,ContextTokens,GeneratedTokens)", name)
	}
	if len(l.Requests) == 0 {
		return Load{}, fmt.Errorf("%s: no requests after the header", name)
	}
	return l, nil
}

func parseAzureLine(b []byte) (time.Time, int, int, error) {
	f := bytes.Split(b, []byte{','})
	if len(f) != 3 {
		return time.Time{}, 0, 0, fmt.Errorf("%d fields: want TIMESTAMP,ContextTokens,GeneratedTokens", len(f))
	}
	ts, err := time.Parse(azureTimeLayout, string(bytes.TrimSpace(f[0])))
	if err != nil {
		return time.Time{}, 0, 0, fmt.Errorf("TIMESTAMP %q: want like 2023-11-16 18:15:46.6805900", truncate(f[0]))
	}
	in, err := strconv.Atoi(string(bytes.TrimSpace(f[1])))
	if err != nil || in < 1 || in > MaxInputTokens {
		return time.Time{}, 0, 0, fmt.Errorf("ContextTokens %q: want an integer in [1, %d]", truncate(f[1]), MaxInputTokens)
	}
	out, err := strconv.Atoi(string(bytes.TrimSpace(f[2])))
	if err != nil || out < 0 || out > MaxOutputTokens {
		return time.Time{}, 0, 0, fmt.Errorf("GeneratedTokens %q: want an integer in [0, %d]", truncate(f[2]), MaxOutputTokens)
	}
	return ts, in, out, nil
}

// truncate keeps messages short when a field is huge.
func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// LoadAzure reads an Azure trace file (see ParseAzure).
func LoadAzure(path string, limit int) (Load, error) {
	f, err := os.Open(path)
	if err != nil {
		return Load{}, fmt.Errorf("azure trace: %w", err)
	}
	defer f.Close()
	return ParseAzure(f, path, limit)
}
