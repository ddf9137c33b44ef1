// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain, the
// package etcd's release binary calls), built from the module at the version
// k8s.io/kubernetes pins, so the tests start the etcd the API server is
// released against without downloading a binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
