package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvgate/kvgate/picker"
)

// SwitchTerm applies one `--term NAME=VALUE` to cfg: VALUE is off, on, or
// a weight (a number, as extproc.picker.terms.NAME.weight). A term's worth
// is then one replay: the same trace with the term off.
func SwitchTerm(cfg *picker.Config, arg string) error {
	name, value, ok := strings.Cut(arg, "=")
	if !ok {
		return fmt.Errorf("--term %q: want NAME=off, NAME=on or NAME=WEIGHT", arg)
	}
	id, ok := picker.LookupTerm(name)
	if !ok {
		return fmt.Errorf("--term %q: unknown term %q (terms: %s)", arg, name, strings.Join(TermNames(), ", "))
	}
	switch value {
	case "off":
		cfg.TermsOff[id] = true
	case "on":
		cfg.TermsOff[id] = false
	default:
		w, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fmt.Errorf("--term %q: %q is not off, on or a weight", arg, value)
		}
		if err := cfg.SetTermWeight(id, w); err != nil {
			return fmt.Errorf("--term %q: %w", arg, err)
		}
		cfg.TermsOff[id] = false
	}
	return nil
}

// TermNames lists the picker's terms, in the order they are summed.
func TermNames() []string {
	var names []string
	for _, t := range picker.TermList() {
		names = append(names, t.Name)
	}
	return names
}

// WriteTermMeans prints, for each picker policy in res, the mean column of
// every listed term at the chosen worker (PolicyResult.TermMeans).
func WriteTermMeans(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mean term at the chosen worker (KV blocks)\t%s\t\n", strings.Join(TermNames(), "\t"))
	for _, p := range res.Order {
		means := res.Policies[p].TermMeans
		if means == nil {
			continue
		}
		fmt.Fprintf(tw, "%s", p)
		for _, n := range TermNames() {
			fmt.Fprintf(tw, "\t%.2f", means[n])
		}
		fmt.Fprintln(tw, "\t")
	}
	return tw.Flush()
}
