package inventory

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// descInfo is what a *prometheus.Desc holds that the inventory needs.
// client_golang gives Desc no accessors, only String(), whose format
// (client_golang v1.x desc.go) is
//
//	Desc{fqName: "x", help: "y", unit: "", constLabels: {a="1",b="2"}, variableLabels: {c,c(d)}}
//
// where c(d) marks a variable label with a value constraint. The quoted
// parts are Go-quoted (%q), so they are read back with strconv.
type descInfo struct {
	name        string
	help        string
	constLabels []string
	varLabels   []string
}

var labelNameRe = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func parseDesc(d *prometheus.Desc) (descInfo, error) {
	return parseDescString(d.String())
}

func parseDescString(s string) (descInfo, error) {
	fail := func(why string) (descInfo, error) {
		return descInfo{}, fmt.Errorf("metric description %s: %s", s, why)
	}
	rest, ok := strings.CutPrefix(s, "Desc{")
	if !ok {
		return fail(`does not start with "Desc{"`)
	}
	var info descInfo
	quoted := func(key string) (string, bool) {
		r, ok := strings.CutPrefix(rest, key+": ")
		if !ok {
			return "", false
		}
		q, err := strconv.QuotedPrefix(r)
		if err != nil {
			return "", false
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return "", false
		}
		rest = strings.TrimPrefix(r[len(q):], ", ")
		return v, true
	}
	if info.name, ok = quoted("fqName"); !ok {
		return fail("no quoted fqName")
	}
	if info.help, ok = quoted("help"); !ok {
		return fail("no quoted help")
	}
	if strings.HasPrefix(rest, "unit: ") { // absent before client_golang v1.21
		if _, ok = quoted("unit"); !ok {
			return fail("bad unit")
		}
	}
	r, ok := strings.CutPrefix(rest, "constLabels: {")
	if !ok {
		return fail("no constLabels")
	}
	rest = r
	for !strings.HasPrefix(rest, "}") {
		name, r, ok := strings.Cut(rest, "=")
		if !ok || !labelNameRe.MatchString(name) {
			return fail("bad constant label")
		}
		q, err := strconv.QuotedPrefix(r)
		if err != nil {
			return fail("constant label " + name + " has no quoted value")
		}
		info.constLabels = append(info.constLabels, name)
		rest = strings.TrimPrefix(r[len(q):], ",")
	}
	r, ok = strings.CutPrefix(rest, "}, variableLabels: {")
	if !ok {
		return fail("no variableLabels")
	}
	list, tail, ok := strings.Cut(r, "}")
	if !ok || tail != "}" {
		return fail("variableLabels not closed")
	}
	if list != "" {
		for _, l := range strings.Split(list, ",") {
			if inner, ok := strings.CutPrefix(l, "c("); ok {
				l = strings.TrimSuffix(inner, ")")
			}
			if !labelNameRe.MatchString(l) {
				return fail(fmt.Sprintf("bad variable label %q", l))
			}
			info.varLabels = append(info.varLabels, l)
		}
	}
	if info.name == "" {
		return fail("empty metric name")
	}
	return info, nil
}
