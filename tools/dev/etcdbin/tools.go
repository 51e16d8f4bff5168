//go:build tools

// Package etcdbin pins the etcd server virtpod builds for its tests and local cluster.
package etcdbin

import _ "go.etcd.io/etcd/server/v3"
