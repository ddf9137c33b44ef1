//go:build tools

// Package assets pins the Kubernetes API server the tests build
// (k8s.io/kubernetes/cmd/kube-apiserver at the release go.mod names); the
// build tag keeps it out of every ordinary build.
package assets

import _ "k8s.io/kubernetes/cmd/kube-apiserver/app"
