#!/usr/bin/env bash
# retag.sh NAME NEWTAG: what the Tiltfile does for one rebuilt image, without Tilt or a build.
# It tags the image NAME, already in the local cluster's containerd (k8s.io namespace), as
# REPOSITORY:NEWTAG, and maps NAME's repository (any tag of it) to that new reference in the
# controller's image-map ConfigMap, so VMs using the image move to it (at once with
# imageUpdatePolicy: Recreate). Prints the new reference. NEWTAG may also be a whole reference
# (REPOSITORY:TAG), used as it is.
#
#   tools/dev/devloop/retag.sh localhost/virtpod/runner:dev tilt-3f2a1c
#   -> localhost/virtpod/runner:tilt-3f2a1c, and the map line
#      "localhost/virtpod/runner localhost/virtpod/runner:tilt-3f2a1c"
#
# Environment (defaults: the local cluster of make cluster-up): KUBECTL, KUBECONFIG, CTR,
# CONTAINERD_ADDRESS, VIRTPOD_CACHE, and IMAGE_MAP (NAMESPACE/NAME, virtpod-system/virtpod-image-map).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"

if [ $# -ne 2 ] || [ -z "$1" ] || [ -z "$2" ]; then
	echo "usage: $0 NAME NEWTAG   (e.g. $0 localhost/virtpod/runner:dev tilt-3f2a1c)" >&2
	exit 2
fi
name="$1" newtag="$2"
repo="$(repository_of "$name")"
case "$newtag" in
*@*) devloop_die "NEWTAG $newtag is a digest reference: give a tag (tilt-3f2a1c) or REPOSITORY:TAG" ;;
*/* | *:*) # a whole reference
	new="$newtag"
	newtag="${new##*/}"
	case "$newtag" in
	*:*) newtag="${newtag##*:}" ;;
	*) devloop_die "NEWTAG $new has no tag: give a tag (tilt-3f2a1c) or a reference with one (REPOSITORY:TAG)" ;;
	esac
	;;
*) new="$repo:$newtag" ;;
esac
case "$newtag" in
"" | *[!A-Za-z0-9_.-]* | [.-]*) devloop_die "NEWTAG $newtag is not a tag: letters, digits, _ . - (not first), up to 128" ;;
esac
[ ${#newtag} -le 128 ] || devloop_die "NEWTAG is longer than 128 characters"
[ -x "$CTR" ] || devloop_die "CTR=$CTR is not executable: run make cluster-up (it builds containerd), or set CTR"
[ -S "$CONTAINERD_ADDRESS" ] || devloop_die "CONTAINERD_ADDRESS=$CONTAINERD_ADDRESS is not a socket: run make cluster-up, or set CONTAINERD_ADDRESS"

# --force: tagging again (a rerun) moves the tag instead of failing. ctr's output (and its
# warnings) only matter when it fails.
if ! out="$("$CTR" -a "$CONTAINERD_ADDRESS" -n k8s.io images tag --force "$name" "$new" 2>&1)"; then
	devloop_die "ctr images tag $name $new failed: is $name in containerd? (ctr -a $CONTAINERD_ADDRESS -n k8s.io images ls -q)
$out"
fi
set_image_map "$repo" "$new" >/dev/null
echo "$new"
