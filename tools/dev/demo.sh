#!/usr/bin/env bash
# `make demo RELEASE_DIR`, after `make cluster-up` and `make release-assets` into the cluster's
# registry: install virtpod from that release as a user would (install.yaml with the images by
# digest, plus the local cluster's settings; tools/dev/install-release.sh), apply the sample VM,
# wait until it runs, and show it.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${KUBECTL:?set by make demo}" "${KUBECONFIG:?set by make demo}"
k() { "$KUBECTL" "$@"; }

release=${1:?usage: demo.sh RELEASE_DIR}
echo "== installing virtpod from $release (kubectl apply --server-side, images from the cluster's registry)"
tools/dev/install-release.sh "$release"

echo "== applying the sample VM (config/samples)"
k apply -k config/samples
if ! k wait --for=jsonpath='{.status.phase}'=Running vm/demo --timeout=300s >/dev/null; then
	echo "the VM did not reach Running; what it says:" >&2
	k get vm demo -o yaml >&2
	k describe pod demo-runner >&2 || true
	exit 1
fi

echo
k get vm -o wide
echo
echo "== the guest's first console lines (kubectl logs demo-runner)"
for _ in $(seq 1 30); do
	k logs demo-runner 2>/dev/null | grep -q VIRTPOD-GUEST-READY && break
	sleep 1
done
# The console without the runner's own JSON log lines: the kernel's first words, then the
# guest's userspace up to its ready marker.
console=$(k logs demo-runner | grep -v '^{')
echo "$console" | sed -n '1,2p'
echo "  [...]"
echo "$console" | grep -v '^\[' | sed -n '1,10p'

cat <<EOM

The VM runs in pod demo-runner and answers at its IP (kubectl get vm demo -o wide).
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$KUBECTL
  kubectl get vm,pods -o wide
  kubectl describe vm demo
Stop everything with: make demo-down
EOM
