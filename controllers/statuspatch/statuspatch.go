// Package statuspatch writes a reconciler's status the one way every virtpod reconciler does: a
// merge patch of the status subresource, guarded by resourceVersion, and no request at all when
// the status did not change.
package statuspatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Patch writes next's status when it differs from old's, and does nothing otherwise.
//
// The patch is guarded by next's resourceVersion: the one read, or the one of the last write
// this reconcile made. A reconciler that worked from a stale object gets a conflict instead of
// overwriting newer status. The patch carries next's whole status, with null for each field
// old had and next has not, so the stored status becomes exactly next's: a diff alone would
// leave out zero values never written (a required count of 0 on the first write).
//
// On success next holds what the server stored, with its new resourceVersion.
func Patch(ctx context.Context, c client.Client, old, next client.Object) error {
	was, err := status(old)
	if err != nil {
		return err
	}
	now, err := status(next)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(was, now) {
		return nil
	}
	rv := next.GetResourceVersion()
	if rv == "" {
		return fmt.Errorf("status of %s has no resourceVersion to guard the patch with", client.ObjectKeyFromObject(next))
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": rv},
		"status":   replacing(was, now),
	})
	if err != nil {
		return err
	}
	return c.Status().Patch(ctx, next, client.RawPatch(types.MergePatchType, body))
}

// IgnoreStale drops the errors that say the object changed or went away after it was read:
// the newer object's event brings the reconciler back (a deleted one needs nothing more).
func IgnoreStale(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// status is obj's status as it is written, field by field; empty when it has none.
func status(obj client.Object) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("reading the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	s, ok := u["status"].(map[string]any)
	if !ok && u["status"] != nil {
		return nil, errors.New("status is not an object")
	}
	if s == nil {
		s = map[string]any{}
	}
	return s, nil
}

// replacing is the merge patch that turns was into now: all of now, and null for every field of
// was that now lacks, at any depth of nested objects. Lists are replaced whole, as merge patches
// do.
func replacing(was, now map[string]any) map[string]any {
	out := make(map[string]any, len(now))
	for k, v := range now {
		if wm, ok := was[k].(map[string]any); ok {
			if nm, ok := v.(map[string]any); ok {
				out[k] = replacing(wm, nm)
				continue
			}
		}
		out[k] = v
	}
	for k := range was {
		if _, ok := now[k]; !ok {
			out[k] = nil
		}
	}
	return out
}
