#!/usr/bin/env bash
# The Tiltfile's image-map step (a k8s_custom_deploy with image_deps).
#
#   tilt-image-map.sh apply FROM...   Tilt runs this after building the images, with their new
#                                     references in TILT_IMAGE_0, TILT_IMAGE_1, ... in the order of
#                                     image_deps; FROM i is mapped to TILT_IMAGE_i in the image-map
#                                     ConfigMap, other lines kept. Prints the ConfigMap, which is how
#                                     Tilt learns what it deployed.
#   tilt-image-map.sh delete FROM...  tilt down: removes those lines.
#
# retag.sh does the same for one image without Tilt. Environment as in lib.sh.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"

action="${1:-}"
shift || true
[ $# -gt 0 ] || devloop_die "usage: $0 apply|delete FROM..."
case "$action" in
apply)
	pairs=()
	i=0
	for from in "$@"; do
		var="TILT_IMAGE_$i"
		[ -n "${!var:-}" ] || devloop_die "$var is not set: Tilt sets it for image_deps entry $i ($from)"
		pairs+=("$from" "${!var}")
		i=$((i + 1))
	done
	set_image_map "${pairs[@]}"
	;;
delete)
	unset_image_map "$@"
	;;
*)
	devloop_die "usage: $0 apply|delete FROM..."
	;;
esac
