package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// maxRuleBytes bounds what is read from one rules file.
const maxRuleBytes = 4 << 20

// ReadPrometheusRule decodes a PrometheusRule strictly: an unknown or
// misspelt field (e.g. "anotations") is an error, as the API server's
// structural schema would prune it silently.
func ReadPrometheusRule(r io.Reader) (*monitoringv1.PrometheusRule, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxRuleBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRuleBytes {
		return nil, fmt.Errorf("rules file larger than %d bytes", maxRuleBytes)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("rules YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var pr monitoringv1.PrometheusRule
	if err := dec.Decode(&pr); err != nil {
		return nil, fmt.Errorf("PrometheusRule: %w", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("PrometheusRule: apiVersion/kind %s/%s, want monitoring.coreos.com/v1/PrometheusRule", pr.APIVersion, pr.Kind)
	}
	return &pr, nil
}

var alertNameRe = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// CheckRules checks every rule of a PrometheusRule: its expression against
// the inventory, a valid `for`, and for alerts a severity label, a summary
// and a runbook_url whose fragment is an entry of the runbook (given as
// its Markdown text).
func (inv *Inventory) CheckRules(pr *monitoringv1.PrometheusRule, runbook string) []string {
	var problems []string
	anchors := MarkdownAnchors(runbook)
	names := map[string]bool{}
	for gi, g := range pr.Spec.Groups {
		if g.Name == "" {
			problems = append(problems, fmt.Sprintf("groups[%d]: no name", gi))
		}
		for ri, r := range g.Rules {
			where := fmt.Sprintf("groups[%d] (%s) rules[%d] (%s%s)", gi, g.Name, ri, r.Alert, r.Record)
			add := func(format string, args ...any) {
				problems = append(problems, where+": "+fmt.Sprintf(format, args...))
			}
			if (r.Alert == "") == (r.Record == "") {
				add("exactly one of alert and record is required")
			}
			_, errs := inv.Check(r.Expr.String())
			for _, e := range errs {
				add("expr: %s", e)
			}
			if r.For != nil {
				if _, err := model.ParseDuration(string(*r.For)); err != nil {
					add("for: %v", err)
				}
			}
			if r.Record != "" {
				continue
			}
			if !alertNameRe.MatchString(r.Alert) {
				add("alert name should be CamelCase")
			}
			if names[r.Alert] {
				add("duplicate alert name")
			}
			names[r.Alert] = true
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				add("labels.severity %q, want critical, warning or info", r.Labels["severity"])
			}
			if strings.TrimSpace(r.Annotations["summary"]) == "" {
				add("annotations.summary is required")
			}
			if strings.TrimSpace(r.Annotations["description"]) == "" {
				add("annotations.description is required")
			}
			u, err := url.Parse(r.Annotations["runbook_url"])
			switch {
			case r.Annotations["runbook_url"] == "" || err != nil:
				add("annotations.runbook_url is required (a URL of its deploy/RUNBOOK.md entry)")
			case !strings.HasSuffix(u.Path, "deploy/RUNBOOK.md") || u.Fragment == "":
				add("annotations.runbook_url %s does not point at an entry of deploy/RUNBOOK.md", u)
			case !anchors[u.Fragment]:
				add("annotations.runbook_url: deploy/RUNBOOK.md has no heading with anchor #%s", u.Fragment)
			}
		}
	}
	return problems
}

// MarkdownAnchors lists the heading anchors GitHub generates for a
// Markdown text: the heading lower-cased, punctuation other than - and _
// dropped, spaces turned into dashes.
func MarkdownAnchors(md string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		out[Anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
	}
	return out
}

// Anchor is GitHub's anchor for one heading text.
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
