#!/usr/bin/env bash
# sync.sh VM SHARE DIR: the dev loop's fast path, what Tilt's live_update sync() does, for a
# running VM. It copies DIR's contents into the VM's virtio-fs share SHARE (an emptyDir in
# spec.guest.filesystems) through the runner container — tar over `kubectl exec`, as kubectl cp
# and Tilt do — so the guest sees the files at once, with no rebuild and no reboot. Then it runs
# $RESTART, if set, on this machine: the hook that restarts whatever in the guest serves the files
# (e.g. RESTART='vmctl ssh dev -- systemctl restart web').
#
#   tools/dev/devloop/sync.sh dev site tools/dev/devloop/site
#
# Environment: KUBECTL, KUBECONFIG (the local cluster's by default), NAMESPACE (kubectl's default
# when empty), RESTART.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"

if [ $# -ne 3 ] || [ -z "$1" ] || [ -z "$2" ] || [ -z "$3" ]; then
	echo "usage: $0 VM SHARE DIR   (e.g. $0 dev site tools/dev/devloop/site)" >&2
	exit 2
fi
vm="$1" share="$2" dir="$3"
[ -d "$dir" ] || devloop_die "DIR $dir is not a directory"
case "$share" in
"" | *[!a-z0-9-]* | -* | *-) devloop_die "SHARE $share is not a filesystem name (a DNS label: a-z, 0-9, -)" ;;
esac
need_kubectl
ns=()
[ -z "${NAMESPACE:-}" ] || ns=(-n "$NAMESPACE")
# podspec.PodName and FilesystemsMount: the runner pod and where its shares are mounted.
pod="$vm-runner" target="/virtpod/fs/$share"
# A missing share would have tar create a directory the guest never sees: say so instead.
"$KUBECTL" "${ns[@]}" exec "$pod" -c runner -- ls -d "$target" >/dev/null 2>&1 ||
	devloop_die "$pod has no share $share at $target: is VM $vm running, with spec.guest.filesystems[].name $share?"
tar -C "$dir" -cf - . | "$KUBECTL" "${ns[@]}" exec -i "$pod" -c runner -- tar -xf - -C "$target"
echo "synced $dir into $vm's share $share"
if [ -n "${RESTART:-}" ]; then
	bash -c "$RESTART"
fi
