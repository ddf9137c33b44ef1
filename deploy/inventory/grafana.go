package inventory

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// Dashboard is the part of a Grafana dashboard JSON model the checks and
// the screenshot renderer read. Grafana's model has many more fields;
// they are kept in the file and ignored here.
type Dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Variable is one template variable.
type Variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"` // datasource, query, custom, interval, …
	Query any    `json:"query"`
}

// Panel is one panel (rows carry their collapsed panels).
type Panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  *DatasourceRef  `json:"datasource"`
	GridPos     GridPos         `json:"gridPos"`
	Targets     []Target        `json:"targets"`
	Panels      []Panel         `json:"panels"`
	FieldConfig json.RawMessage `json:"fieldConfig"`
}

// GridPos places a panel on Grafana's 24-column grid.
type GridPos struct{ H, W, X, Y int }

// DatasourceRef names a data source, here always the ${datasource} variable.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string         `json:"refId"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	Datasource   *DatasourceRef `json:"datasource"`
}

// Unit is the panel's display unit (fieldConfig.defaults.unit), "" if none.
func (p Panel) Unit() string {
	var fc struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	}
	if len(p.FieldConfig) > 0 {
		_ = json.Unmarshal(p.FieldConfig, &fc)
	}
	return fc.Defaults.Unit
}

// maxDashboardBytes bounds what is read from one dashboard file.
const maxDashboardBytes = 4 << 20

// ReadDashboard decodes one dashboard JSON file.
func ReadDashboard(r io.Reader) (*Dashboard, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxDashboardBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxDashboardBytes {
		return nil, fmt.Errorf("dashboard larger than %d bytes", maxDashboardBytes)
	}
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	return &d, nil
}

// AllPanels lists the panels in display order, rows' nested panels included.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// builtinVars are Grafana's own variables, with a value that keeps the
// expression valid: durations where Grafana substitutes a duration.
var builtinVars = map[string]string{
	"__rate_interval": "1m", "__interval": "30s", "__range": "1h", "__range_s": "3600", "__range_ms": "3600000",
	"__interval_ms": "30000", "__dashboard": "kvgate", "__name": "x",
}

// varRe matches $name, ${name}, ${name:format} and [[name]].
var varRe = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// Expand substitutes template variables: Grafana's builtins by values[name]
// or else a value of the right kind, the dashboard's own variables by
// values[name] or else ".*" (All), and reports variables the dashboard does
// not define.
func (d *Dashboard) Expand(expr string, values map[string]string) (string, []string) {
	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	var unknown []string
	out := varRe.ReplaceAllStringFunc(expr, func(m string) string {
		sm := varRe.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if v, ok := values[name]; ok && strings.HasPrefix(name, "__") {
			return v
		}
		if v, ok := builtinVars[name]; ok {
			return v
		}
		if !defined[name] {
			if !slices.Contains(unknown, name) {
				unknown = append(unknown, name)
			}
			return m
		}
		if v, ok := values[name]; ok {
			return v
		}
		return ".*"
	})
	return out, unknown
}

var legendRe = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// LegendLabels lists the labels a legend format refers to.
func LegendLabels(format string) []string {
	var out []string
	for _, m := range legendRe.FindAllStringSubmatch(format, -1) {
		out = append(out, m[1])
	}
	return out
}

// CheckDashboard checks a dashboard against the inventory: structure
// (schema version, the datasource variable used by every panel and
// query, unique panel ids, panels inside the 24-column grid), every
// query's PromQL, and every legend label. Problems name the panel.
func (inv *Inventory) CheckDashboard(d *Dashboard) []string {
	var problems []string
	add := func(where, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("dashboard %q: %s: %s", d.Title, where, fmt.Sprintf(format, args...)))
	}
	if d.UID == "" || d.Title == "" {
		add("top", "uid and title are required")
	}
	if d.SchemaVersion < 39 {
		add("top", "schemaVersion %d, want at least 39", d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" {
			hasDS = true
		}
	}
	if !hasDS {
		add("templating", `no "datasource" variable of type datasource`)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		for _, p := range inv.checkVariableQuery(d, v) {
			add("variable $"+v.Name, "%s", p)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.AllPanels() {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] {
			add(where, "duplicate panel id")
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			add(where, "gridPos %+v outside the 24-column grid", p.GridPos)
		}
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			add(where, "datasource must be the ${datasource} variable")
		}
		if len(p.Targets) == 0 {
			add(where, "no query")
		}
		for _, t := range p.Targets {
			tw := fmt.Sprintf("%s query %s", where, t.RefID)
			if t.Datasource != nil && t.Datasource.UID != "${datasource}" {
				add(tw, "datasource must be the ${datasource} variable")
			}
			expr, unknown := d.Expand(t.Expr, nil)
			for _, u := range unknown {
				add(tw, "variable $%s is not defined by the dashboard", u)
			}
			res, errs := inv.Check(expr)
			for _, e := range errs {
				add(tw, "%s", e)
			}
			if len(errs) == 0 {
				for _, l := range LegendLabels(t.LegendFormat) {
					if !slices.Contains(res, l) {
						add(tw, "legend {{%s}}: the query's series carry no label %q (they have: %s)", l, l, strings.Join(res, ", "))
					}
				}
			}
		}
	}
	return problems
}

// labelValuesRe matches Grafana's label_values(selector, label) query.
var labelValuesRe = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// checkVariableQuery checks a query variable's label_values(selector,
// label): the selector against the inventory, the label against its series.
func (inv *Inventory) checkVariableQuery(d *Dashboard, v Variable) []string {
	q := ""
	switch t := v.Query.(type) {
	case string:
		q = t
	case map[string]any:
		q, _ = t["query"].(string)
	}
	m := labelValuesRe.FindStringSubmatch(q)
	if m == nil {
		return []string{fmt.Sprintf("query %q: only label_values(selector, label) is supported", q)}
	}
	expr, unknown := d.Expand(m[1], nil)
	var problems []string
	for _, u := range unknown {
		problems = append(problems, fmt.Sprintf("variable $%s is not defined by the dashboard", u))
	}
	res, errs := inv.Check(expr)
	problems = append(problems, errs...)
	if len(errs) == 0 && !slices.Contains(res, m[2]) {
		problems = append(problems, fmt.Sprintf("label_values: %s carries no label %q", m[1], m[2]))
	}
	return problems
}
