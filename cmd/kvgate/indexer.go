package main

import (
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/daemon/indexerd"
)

func init() { register("indexer", daemon.Command(indexerd.Spec)) }
