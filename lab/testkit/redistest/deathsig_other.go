//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere Close must run to stop servers.
func setParentDeathSignal(cmd *exec.Cmd) {}
