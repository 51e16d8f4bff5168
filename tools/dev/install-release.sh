#!/usr/bin/env bash
# install-release.sh RELEASE_DIR: install (or upgrade to) a virtpod release on the local cluster
# as a user installs one, from its install.yaml with `kubectl apply --server-side`, plus the
# local cluster's settings (config/local-settings) as a kustomize overlay on top of it, so one
# field manager owns everything and the next release applies over it without conflicts
# (docs/install.md). Waits for the controller and the node agent to roll out.
set -euo pipefail
rel=${1:?usage: install-release.sh RELEASE_DIR [install.yaml|infrastructure-components.yaml]}
file=${2:-install.yaml}
: "${KUBECTL:?set KUBECTL}" "${KUBECONFIG:?set KUBECONFIG}"
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$rel/$file" ] || { echo "install-release.sh: no $rel/$file: run make release" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$rel/$file" "$tmp/install.yaml"
cat >"$tmp/kustomization.yaml" <<K
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [install.yaml]
components: [$(realpath --relative-to="$tmp" "$root/config/local-settings")]
K
k() { "$KUBECTL" "$@"; }
# The first pass on a new cluster creates the CRDs; the ProviderClasses need them established.
if ! out=$(k apply --server-side -k "$tmp" 2>&1); then
	k wait --for=condition=Established crd --all --timeout=60s >/dev/null
	out=$(k apply --server-side -k "$tmp" 2>&1) || { echo "$out" >&2; exit 1; }
fi
k wait --for=condition=Established crd/virtualmachines.vm.virtpod.io --timeout=60s >/dev/null
k -n virtpod-system rollout status deployment/virtpod-controller --timeout=180s
k -n virtpod-system rollout status daemonset/virtpod-agent --timeout=180s
k -n virtpod-system rollout status daemonset/virtpod-device-plugin --timeout=180s
echo "virtpod installed from $rel"
