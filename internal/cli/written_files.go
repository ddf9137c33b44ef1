package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// ReportWritten prints "wrote PATH" for each file in dir modified since
// since: the plot writer simulate.WritePlots writes a
// fixed set of files into a folder and returns no list, and a user should
// not have to guess what appeared where.
func ReportWritten(w io.Writer, dir string, since time.Time) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		// Some filesystems keep whole seconds: compare at that grain.
		if !info.ModTime().Before(since.Truncate(time.Second)) {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(w, "wrote %s\n", p)
	}
	if len(paths) == 0 {
		return fmt.Errorf("%s: no file written", dir)
	}
	return nil
}
