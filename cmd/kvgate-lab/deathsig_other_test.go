//go:build !linux

package main

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere the cleanups stop children.
func setParentDeathSignal(cmd *exec.Cmd) {}
