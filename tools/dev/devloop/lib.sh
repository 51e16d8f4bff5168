# shellcheck shell=bash
# Shared by retag.sh and the Tiltfile: the local cluster's defaults (tools/dev/localcluster) and the
# writer of the controller's image-map ConfigMap. Sourced, not run. Every default can be
# overridden from the environment.
VIRTPOD_CACHE="${VIRTPOD_CACHE:-$HOME/.cache/virtpod}"
KUBECTL="${KUBECTL:-$VIRTPOD_CACHE/k8s-v1.37.2/kubectl}"
KUBECONFIG="${KUBECONFIG:-$VIRTPOD_CACHE/cluster/kubeconfig/admin.kubeconfig}"
CTR="${CTR:-$VIRTPOD_CACHE/containerd-v2.4.2/ctr}"
CONTAINERD_ADDRESS="${CONTAINERD_ADDRESS:-/run/virtpod-containerd/containerd.sock}"
# NAMESPACE/NAME of the ConfigMap the controller's --image-map flag names.
IMAGE_MAP="${IMAGE_MAP:-virtpod-system/virtpod-image-map}"
export KUBECONFIG

devloop_die() {
	echo "devloop: $*" >&2
	exit 1
}

# need_kubectl fails early, saying which variable to set, when kubectl cannot reach a cluster.
need_kubectl() {
	[ -x "$KUBECTL" ] || command -v "$KUBECTL" >/dev/null ||
		devloop_die "KUBECTL=$KUBECTL is not executable: run make cluster-up, or set KUBECTL"
	[ -r "$KUBECONFIG" ] || devloop_die "KUBECONFIG=$KUBECONFIG is not readable: run make cluster-up, or set KUBECONFIG"
}

# repository_of REF prints REF without its tag or digest: the form of a map line's FROM that
# matches any tag. A colon before the last slash is a registry port, not a tag.
repository_of() {
	local ref="${1%%@*}"
	case "${ref##*/}" in
	*:*) ref="${ref%:*}" ;;
	esac
	printf '%s\n' "$ref"
}

# drop_lines "FROM..." copies the map lines on stdin, comments included, except blank ones and
# those whose FROM (first field) is listed. It ends with an "x" line end so that the caller's
# $(...) keeps the last newline; the caller strips the x.
drop_lines() {
	awk -v froms="$1" '
		BEGIN { n = split(froms, f, " "); for (i = 1; i <= n; i++) drop[f[i]] = 1 }
		NF == 0 { next }
		!($1 in drop) { print }'
	echo x
}

# set_image_map FROM TO [FROM TO ...] makes each FROM map to its TO in the image-map ConfigMap:
# lines with those FROMs are replaced, every other line (and comment) is kept, and the
# ConfigMap is created when missing. It prints the applied ConfigMap as YAML (Tilt's
# k8s_custom_deploy reads that to know what it deployed).
set_image_map() {
	need_kubectl
	if [ $# -eq 0 ] || [ $(($# % 2)) -ne 0 ]; then
		devloop_die "set_image_map: want FROM TO pairs, got: $*"
	fi
	local ns="${IMAGE_MAP%%/*}" name="${IMAGE_MAP#*/}" current froms="" lines=""
	current="$("$KUBECTL" -n "$ns" get configmap "$name" --ignore-not-found -o jsonpath='{.data.images}')" ||
		devloop_die "reading ConfigMap $IMAGE_MAP failed (is the cluster up and config/local applied?)"
	while [ $# -gt 0 ]; do
		froms="$froms $1"
		lines="$lines$1 $2"$'\n'
		shift 2
	done
	current="$(printf '%s\n' "$current" | drop_lines "$froms")"
	current="${current%x}"
	"$KUBECTL" -n "$ns" create configmap "$name" --from-literal=images="$current$lines" --dry-run=client -o yaml |
		apply_configmap -o yaml
}

# apply_configmap applies the ConfigMap on stdin. Server-side, so it needs no last-applied
# annotation and takes the images key over from whoever wrote it last (kubectl, kustomize, a
# test's client).
apply_configmap() {
	"$KUBECTL" apply --server-side --field-manager=virtpod-devloop --force-conflicts -f - "$@"
}

# unset_image_map FROM... removes the lines for these FROMs, keeping the ConfigMap.
unset_image_map() {
	need_kubectl
	local ns="${IMAGE_MAP%%/*}" name="${IMAGE_MAP#*/}" current
	current="$("$KUBECTL" -n "$ns" get configmap "$name" --ignore-not-found -o jsonpath='{.data.images}')" || return 1
	[ -n "$current" ] || return 0
	current="$(printf '%s\n' "$current" | drop_lines "$*")"
	current="${current%x}"
	"$KUBECTL" -n "$ns" create configmap "$name" --from-literal=images="$current" --dry-run=client -o yaml |
		apply_configmap >/dev/null
}
