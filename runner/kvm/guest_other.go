//go:build !linux

package kvm

import "context"

func runTinyGuest(_ context.Context, res Result) Result {
	res.Reason = "KVM exists only on Linux"
	return res
}
