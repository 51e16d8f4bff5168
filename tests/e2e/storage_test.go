package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDefaultStorageClass: the local cluster's provisioner is real. A claim that names no class
// gets the default (local-path, WaitForFirstConsumer), stays Pending until a pod uses it, then
// binds; what one pod writes, the next pod reads.
func TestDefaultStorageClass(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	var classes storagev1.StorageClassList
	if err := kube.List(ctx, &classes); err != nil {
		t.Fatal(err)
	}
	var def []string
	for _, c := range classes.Items {
		if c.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			def = append(def, c.Name)
			if c.VolumeBindingMode == nil || *c.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
				t.Errorf("default class %s binds %v, want WaitForFirstConsumer", c.Name, c.VolumeBindingMode)
			}
		}
	}
	if len(def) != 1 {
		t.Fatalf("default StorageClasses: %v, want exactly one", def)
	}
	pvc := newClaim(ns, "data", "64Mi", corev1.PersistentVolumeFilesystem)
	if err := kube.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	got := &corev1.PersistentVolumeClaim{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.StorageClassName == nil || *got.Spec.StorageClassName != def[0] {
		t.Errorf("claim's class %v, want the default %s", got.Spec.StorageClassName, def[0])
	}
	runToolbox(t, ns, "writer", "data", "echo kept-across-pods > /data/file && sync")
	if err := kube.Get(ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim %s after a pod used it, want Bound", got.Status.Phase)
	}
	if out := runToolbox(t, ns, "reader", "data", "cat /data/file"); !strings.Contains(out, "kept-across-pods") {
		t.Fatalf("a second pod read %q from the claim, want what the first wrote", out)
	}
}

func newClaim(ns, name, size string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  &mode,
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// runToolbox runs script in a toolbox pod with the claim mounted at /data and returns its output.
func runToolbox(t *testing.T, ns, name, claim, script string) string {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "sh", Image: "localhost/virtpod/toolbox:dev",
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	if err := kube.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod "+name+" done", 3*time.Minute, func() error {
		got := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		switch got.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("pod %s failed: %s", name, podLogs(ns, name))
		}
		return fmt.Errorf("pod %s %s", name, got.Status.Phase)
	})
	return podLogs(ns, name)
}
