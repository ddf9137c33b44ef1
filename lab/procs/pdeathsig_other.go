//go:build !linux

package procs

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere the cleanups must run.
func setParentDeathSignal(cmd *exec.Cmd) {}
