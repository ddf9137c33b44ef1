package main

import (
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/daemon/extprocd"
)

func init() { register("extproc", daemon.Command(extprocd.Spec)) }
