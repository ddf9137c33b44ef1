package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal: the kernel kills the child if the test binary dies
// without its cleanups (a timeout's panic), so no process outlives a run.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
