package main

import (
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/daemon/kvagentd"
)

func init() { register("kvagent", daemon.Command(kvagentd.Spec)) }
