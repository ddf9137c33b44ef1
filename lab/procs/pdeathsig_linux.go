package procs

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the child if the test binary
// dies without running its cleanups (panic, timeout), so crashed runs
// leave no engines behind.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
