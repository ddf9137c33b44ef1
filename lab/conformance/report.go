package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Result is one case's outcome in a report.
type Result struct {
	ID        string  `json:"id"`
	Profile   Profile `json:"profile"`
	Status    Status  `json:"status"`
	Reference string  `json:"reference"`
	Checks    string  `json:"checks"`
	Detail    string  `json:"detail"`
}

// Report is one run against one picker.
type Report struct {
	Target    string    `json:"target"`
	Profile   Profile   `json:"profile"`
	Adapter   string    `json:"adapter,omitempty"`
	PoolKnown bool      `json:"pool_known"`
	Started   time.Time `json:"started"`
	Results   []Result  `json:"results"`
}

// Counts returns how many cases passed, failed and were skipped.
func (r *Report) Counts() (passed, failed, skipped int) {
	for _, c := range r.Results {
		switch c.Status {
		case Pass:
			passed++
		case Fail:
			failed++
		case Skip:
			skipped++
		}
	}
	return passed, failed, skipped
}

// Result returns the outcome of case id, if it ran.
func (r *Report) Result(id string) (Result, bool) {
	for _, c := range r.Results {
		if c.ID == id {
			return c, true
		}
	}
	return Result{}, false
}

// WriteText writes one line per case (status, id, detail, reference) and
// a closing count.
func (r *Report) WriteText(w io.Writer) error {
	for _, c := range r.Results {
		if _, err := fmt.Fprintf(w, "%-4s  %-30s  %s  (%s)\n", map[Status]string{Pass: "PASS", Fail: "FAIL", Skip: "SKIP"}[c.Status], c.ID, c.Detail, c.Reference); err != nil {
			return err
		}
	}
	p, f, s := r.Counts()
	_, err := fmt.Fprintf(w, "%s profile against %s: %d passed, %d failed, %d skipped\n", r.Profile, r.Target, p, f, s)
	return err
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	p, f, s := r.Counts()
	doc := struct {
		*Report
		Passed  int `json:"passed"`
		Failed  int `json:"failed"`
		Skipped int `json:"skipped"`
	}{r, p, f, s}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
