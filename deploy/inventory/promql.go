package inventory

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// labelSet is the set of label names an expression's result series can
// carry, as far as the checker can tell.
type labelSet map[string]bool

func (s labelSet) sorted() []string { return slices.Sorted(maps.Keys(s)) }

func (s labelSet) with(names ...string) labelSet {
	out := labelSet{}
	for k := range s {
		out[k] = true
	}
	for _, n := range names {
		out[n] = true
	}
	return out
}

func (s labelSet) without(names ...string) labelSet {
	out := s.with()
	for _, n := range names {
		delete(out, n)
	}
	return out
}

func setOf(names ...string) labelSet { return labelSet{}.with(names...) }

// Check parses one PromQL expression (template variables already
// substituted) and returns every reference to something the inventory
// does not have: a metric name no component exports, a label matcher, a
// by/without/on/ignoring/group_left label or a label_replace source that
// the series cannot carry. resultLabels is what the expression's result
// series can carry (for checking a panel's legend).
func (inv *Inventory) Check(expr string) (resultLabels []string, problems []string) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("does not parse: %v", err)}
	}
	c := &checker{inv: inv}
	res := c.labels(e)
	return res.sorted(), c.problems
}

type checker struct {
	inv      *Inventory
	problems []string
}

func (c *checker) fail(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	if !slices.Contains(c.problems, p) {
		c.problems = append(c.problems, p)
	}
}

func (c *checker) labels(n parser.Node) labelSet {
	switch n := n.(type) {
	case *parser.VectorSelector:
		return c.selector(n)
	case *parser.MatrixSelector:
		return c.labels(n.VectorSelector)
	case *parser.SubqueryExpr:
		return c.labels(n.Expr)
	case *parser.ParenExpr:
		return c.labels(n.Expr)
	case *parser.UnaryExpr:
		return c.labels(n.Expr)
	case *parser.StepInvariantExpr:
		return c.labels(n.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return labelSet{}
	case *parser.Call:
		return c.call(n)
	case *parser.AggregateExpr:
		return c.aggregate(n)
	case *parser.BinaryExpr:
		return c.binary(n)
	}
	c.fail("unsupported expression %T (%s)", n, n)
	return labelSet{}
}

func (c *checker) selector(vs *parser.VectorSelector) labelSet {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		c.fail("selector %s names no metric (regular-expression names cannot be checked)", vs)
		return labelSet{}
	}
	s, ok := c.inv.Lookup(name)
	if !ok {
		c.fail("metric %s is exported by no kvgate component and no scraped engine", name)
		return labelSet{}
	}
	have := setOf(s.Labels...).with(ScrapeLabels...)
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		if !have[m.Name] {
			c.fail("label %q is not a label of %s (it has: %s)", m.Name, name, strings.Join(s.Labels, ", "))
		}
	}
	return have
}

func stringArg(e parser.Expr) (string, bool) {
	for {
		p, ok := e.(*parser.ParenExpr)
		if !ok {
			break
		}
		e = p.Expr
	}
	if s, ok := e.(*parser.StringLiteral); ok {
		return s.Val, true
	}
	return "", false
}

func (c *checker) call(n *parser.Call) labelSet {
	sets := make([]labelSet, len(n.Args))
	for i, a := range n.Args {
		sets[i] = c.labels(a)
	}
	need := func(s labelSet, label, why string) {
		if label != "" && !s[label] {
			c.fail("%s: label %q is not a label of %s (it has: %s)", why, label, n.Args[0], strings.Join(s.sorted(), ", "))
		}
	}
	switch n.Func.Name {
	case "label_replace": // (v, dst, replacement, src, regex)
		dst, _ := stringArg(n.Args[1])
		src, _ := stringArg(n.Args[3])
		need(sets[0], src, "label_replace source")
		return sets[0].with(dst)
	case "label_join": // (v, dst, separator, src...)
		dst, _ := stringArg(n.Args[1])
		for _, a := range n.Args[3:] {
			src, _ := stringArg(a)
			need(sets[0], src, "label_join source")
		}
		return sets[0].with(dst)
	case "histogram_quantile", "histogram_fraction", "histogram_count", "histogram_sum", "histogram_avg", "histogram_stddev", "histogram_stdvar":
		v := sets[len(sets)-1]
		// Over classic histograms the buckets are told apart by le; a
		// selection without le is a mistake (e.g. a _count series).
		if n.Func.Name == "histogram_quantile" || n.Func.Name == "histogram_fraction" {
			need(v, "le", n.Func.Name)
		}
		return v.without("le")
	case "vector", "time", "pi", "scalar", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "hour", "minute", "month", "year":
		if len(sets) > 0 && n.Func.ReturnType == parser.ValueTypeVector {
			return sets[0]
		}
		return labelSet{}
	}
	out := labelSet{}
	for i, a := range n.Args {
		if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
			out = out.with(sets[i].sorted()...)
		}
	}
	return out
}

func (c *checker) aggregate(n *parser.AggregateExpr) labelSet {
	inner := c.labels(n.Expr)
	if n.Param != nil {
		c.labels(n.Param)
	}
	clause := "by"
	if n.Without {
		clause = "without"
	}
	for _, g := range n.Grouping {
		if !inner[g] {
			c.fail("%s(%s): label %q is not a label of %s (it has: %s)", clause, strings.Join(n.Grouping, ", "), g, n.Expr, strings.Join(inner.sorted(), ", "))
		}
	}
	switch n.Op {
	case parser.TOPK, parser.BOTTOMK, parser.LIMITK, parser.LIMIT_RATIO:
		return inner
	case parser.COUNT_VALUES:
		l, _ := stringArg(n.Param)
		if n.Without {
			return inner.without(n.Grouping...).with(l)
		}
		return setOf(n.Grouping...).with(l)
	}
	if n.Without {
		return inner.without(n.Grouping...)
	}
	return setOf(n.Grouping...)
}

func (c *checker) binary(n *parser.BinaryExpr) labelSet {
	l, r := c.labels(n.LHS), c.labels(n.RHS)
	lScalar, rScalar := n.LHS.Type() == parser.ValueTypeScalar, n.RHS.Type() == parser.ValueTypeScalar
	switch {
	case lScalar && rScalar:
		return labelSet{}
	case lScalar:
		return r
	case rScalar:
		return l
	}
	vm := n.VectorMatching
	if vm == nil {
		return l
	}
	for _, m := range vm.MatchingLabels {
		if vm.On && (!l[m] || !r[m]) {
			c.fail("on(%s): label %q is not on both sides of %s", strings.Join(vm.MatchingLabels, ", "), m, n)
		}
		if !vm.On && !l[m] && !r[m] {
			c.fail("ignoring(%s): label %q is on neither side of %s", strings.Join(vm.MatchingLabels, ", "), m, n)
		}
	}
	switch vm.Card {
	case parser.CardManyToOne:
		for _, inc := range vm.Include {
			if !r[inc] {
				c.fail("group_left(%s): label %q is not on the right side of %s", strings.Join(vm.Include, ", "), inc, n)
			}
		}
		return l.with(vm.Include...)
	case parser.CardOneToMany:
		for _, inc := range vm.Include {
			if !l[inc] {
				c.fail("group_right(%s): label %q is not on the left side of %s", strings.Join(vm.Include, ", "), inc, n)
			}
		}
		return r.with(vm.Include...)
	case parser.CardManyToMany: // and, or, unless
		if n.Op == parser.LOR {
			return l.with(r.sorted()...)
		}
		return l
	}
	// One-to-one arithmetic and comparison keep the left side's labels,
	// only the on() ones when matching on().
	if vm.On {
		return setOf(vm.MatchingLabels...)
	}
	return l.without(vm.MatchingLabels...)
}
