// Package importrules holds no code: its tests check the import graph
// (`go list -deps`) against the rules of issue 18, so that `make test`
// fails when a leaf package or the request-path core starts linking what it
// must not (a network client, a database driver, the Redis backend).
package importrules
