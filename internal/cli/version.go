package cli

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Version is the one line `PROGRAM version` prints: the module version the
// go command stamped into the binary (a release tag, or a pseudo-version
// naming the commit for a build from a checkout), the VCS commit and time
// and whether the tree had local changes, and the Go release. The go
// command records these when it builds a main package inside a VCS checkout
// (cmd/go: "-buildvcs", on by default); a build without them says so.
func Version(program string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return program + " (no build information: built without module support)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", program, bi.Main.Version)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, " commit %s", rev)
		if settings["vcs.modified"] == "true" {
			b.WriteString(" (modified)")
		}
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " of %s", t)
		}
	} else {
		b.WriteString(" (no VCS information: built outside a checkout or with -buildvcs=false)")
	}
	fmt.Fprintf(&b, ", %s", bi.GoVersion)
	return b.String()
}
