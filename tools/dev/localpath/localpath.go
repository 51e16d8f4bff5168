// Package localpath installs rancher's local-path-provisioner on the local cluster as its
// default StorageClass, so PersistentVolumeClaims bind to folders on the node as they would to
// a cloud disk: dynamically, when the first pod that uses one is scheduled
// (WaitForFirstConsumer). The objects follow the project's own deploy/local-path-storage.yaml
// (v0.0.30), with virtpod's images (no registry) and the volumes under the cluster's folder.
package localpath

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Names of what Install creates.
const (
	Namespace      = "local-path-storage"
	StorageClass   = "local-path"
	Provisioner    = "rancher.io/local-path"
	deploymentName = "local-path-provisioner"
	serviceAccount = "local-path-provisioner-service-account"
	configMapName  = "local-path-config"
	roleName       = "local-path-provisioner-role"
	bindingName    = "local-path-provisioner-bind"
	configMount    = "/etc/config/"
)

// Options say which images run and where volumes live.
type Options struct {
	Image       string // the provisioner (imagebuild local-path-provisioner)
	HelperImage string // a busybox image: the helper pods make and remove volume folders with sh
	Path        string // the node folder volumes are made under
}

// setup and teardown are the helper pods' scripts, as upstream ships them.
const (
	setupScript    = "#!/bin/sh\nset -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n"
	teardownScript = "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n"
)

// Objects are everything Install creates, in creation order.
func Objects(o Options) ([]any, error) {
	config, err := json.Marshal(map[string]any{"nodePathMap": []map[string]any{{
		"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": []string{o.Path},
	}}})
	if err != nil {
		return nil, err
	}
	helper, err := yaml.Marshal(&corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "helper-pod"},
		Spec: corev1.PodSpec{
			PriorityClassName: "system-node-critical",
			Tolerations:       []corev1.Toleration{{Key: "node.kubernetes.io/disk-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:        []corev1.Container{{Name: "helper-pod", Image: o.HelperImage, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	})
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"app": deploymentName}
	return []any{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount, Namespace: Namespace}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: roleName, Namespace: Namespace}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: bindingName, Namespace: Namespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: Namespace}}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: roleName}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: bindingName},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: Namespace}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapName, Namespace: Namespace}, Data: map[string]string{
			"config.json": string(config), "setup": setupScript, "teardown": teardownScript, "helperPod.yaml": string(helper),
		}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: deploymentName, Namespace: Namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: serviceAccount,
						Containers: []corev1.Container{{
							Name:            deploymentName,
							Image:           o.Image,
							ImagePullPolicy: corev1.PullIfNotPresent,
							Args:            []string{"--debug", "start", "--config", configMount + "config.json"},
							Env: []corev1.EnvVar{
								{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
								{Name: "CONFIG_MOUNT_PATH", Value: configMount},
							},
							SecurityContext: &corev1.SecurityContext{
								AllowPrivilegeEscalation: ptr.To(false),
								ReadOnlyRootFilesystem:   ptr.To(true),
								RunAsNonRoot:             ptr.To(true),
								Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							},
							VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: configMount}},
						}},
						Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMapName}}}}},
					},
				},
			},
		},
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: StorageClass,
				Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner:       Provisioner,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		},
	}, nil
}

// Install creates the provisioner's objects (those that exist are left as they are, so a
// second `up` changes nothing) and waits until its Deployment is available.
func Install(ctx context.Context, cs kubernetes.Interface, o Options) error {
	objs, err := Objects(o)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := create(ctx, cs, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("local-path-provisioner: %T: %w", obj, err)
		}
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(Namespace).Get(ctx, deploymentName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d of 1 replicas available", d.Status.AvailableReplicas)
		return d.Status.AvailableReplicas >= 1, nil
	})
	if err != nil {
		return fmt.Errorf("local-path-provisioner not available (%s): see kubectl -n %s describe deployment %s", last, Namespace, deploymentName)
	}
	return nil
}

func create(ctx context.Context, cs kubernetes.Interface, obj any) error {
	c := metav1.CreateOptions{}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = cs.CoreV1().Namespaces().Create(ctx, o, c)
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, c)
	case *rbacv1.Role:
		_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, c)
	case *rbacv1.RoleBinding:
		_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, c)
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, c)
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, c)
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, c)
	case *appsv1.Deployment:
		_, err = cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, c)
	case *storagev1.StorageClass:
		_, err = cs.StorageV1().StorageClasses().Create(ctx, o, c)
	default:
		err = fmt.Errorf("unknown object %T", obj)
	}
	return err
}
