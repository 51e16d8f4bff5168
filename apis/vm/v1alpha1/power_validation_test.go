package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestPowerFields: what the API server takes in runStrategy and runRequestedAt, and what it
// refuses, as written by hand (kubectl apply of YAML, a merge patch), not only by Go clients.
func TestPowerFields(t *testing.T) {
	ctx := context.Background()
	raw := func(t *testing.T, name string, spec map[string]any) *unstructured.Unstructured {
		t.Helper()
		typed, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kubeapi.SampleVM("default", name))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: typed}
		u.SetAPIVersion(vmv1.GroupVersion.String())
		u.SetKind("VirtualMachine")
		for k, v := range spec {
			if err := unstructured.SetNestedField(u.Object, v, "spec", k); err != nil {
				t.Fatal(err)
			}
		}
		return u
	}
	for _, tc := range []struct {
		name      string
		spec      map[string]any
		strict    bool   // fieldValidation=Strict, as kubectl apply sends
		field     string // "" when accepted
		hint      string
		wantStrat vmv1.RunStrategy
	}{
		{name: "runRequestedAt not a time", spec: map[string]any{"runRequestedAt": "yesterday"}, field: "spec.runRequestedAt", hint: "date-time"},
		{name: "runRequestedAt without a zone", spec: map[string]any{"runRequestedAt": "2025-01-01T12:00:00"}, field: "spec.runRequestedAt", hint: "date-time"},
		{name: "runRequestedAt a number", spec: map[string]any{"runRequestedAt": int64(1735732800)}, field: "spec.runRequestedAt", hint: "date-time"},
		{name: "lower-case strategy", spec: map[string]any{"runStrategy": "halted"}, field: "spec.runStrategy", hint: `"Halted"`},
		{name: "the removed restartPolicy", spec: map[string]any{"restartPolicy": "Always"}, strict: true, field: "spec.restartPolicy", hint: "unknown field"},
		{name: "RFC 3339 with a zone", spec: map[string]any{"runRequestedAt": "2025-01-01T13:00:00+01:00", "runStrategy": "Manual"}, wantStrat: vmv1.RunManual},
		{name: "Halted from the start", spec: map[string]any{"runStrategy": "Halted"}, wantStrat: vmv1.RunHalted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := raw(t, "power-"+strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"), tc.spec)
			var opts []client.CreateOption
			if tc.strict {
				opts = append(opts, client.FieldValidation(metav1.FieldValidationStrict))
			}
			err := env.Client.Create(ctx, u, opts...)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				got := &vmv1.VirtualMachine{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
					t.Fatal(err)
				}
				if got.Spec.RunStrategy != tc.wantStrat {
					t.Errorf("runStrategy %q, want %q", got.Spec.RunStrategy, tc.wantStrat)
				}
				if r := got.Spec.RunRequestedAt; tc.spec["runRequestedAt"] != nil && (r == nil || !r.Equal(&metav1.Time{Time: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)})) {
					t.Errorf("runRequestedAt %v, want 2025-01-01T12:00:00Z", r)
				}
				return
			}
			refused(t, err, !tc.strict, tc.field, tc.hint) // an unknown field under Strict is a BadRequest
		})
	}
}

// TestPowerChanges: runStrategy and runRequestedAt change freely on a running VM, and status
// takes phase Stopped and the run-request fields.
func TestPowerChanges(t *testing.T) {
	ctx := context.Background()
	vm := kubeapi.SampleVM("default", "power-changes")
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	for _, s := range []vmv1.RunStrategy{vmv1.RunHalted, vmv1.RunManual, vmv1.RunOnce, vmv1.RunRerunOnFailure, vmv1.RunAlways} {
		patch := []byte(`{"spec":{"runStrategy":"` + string(s) + `","runRequestedAt":"` + time.Now().UTC().Format(time.RFC3339) + `"}}`)
		if err := env.Client.Patch(ctx, vm, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatalf("to %s: %v", s, err)
		}
	}
	now := metav1.Now()
	vm.Status = vmv1.VirtualMachineStatus{Phase: vmv1.PhaseStopped, UserRestartCount: 2, LastRunRequest: &now}
	if err := env.Client.Status().Update(ctx, vm); err != nil {
		t.Fatalf("status with phase Stopped: %v", err)
	}
	vm.Status.Phase = "Halted"
	if err := env.Client.Status().Update(ctx, vm); err == nil || !strings.Contains(err.Error(), "status.phase") {
		t.Fatalf("an unknown phase was not refused: %v", err)
	}
}
