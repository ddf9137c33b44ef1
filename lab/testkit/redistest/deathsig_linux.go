package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill redis-server if the test binary
// dies without running its cleanups (panic, timeout, SIGKILL), so crashed
// runs do not leave servers behind on CI machines.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
