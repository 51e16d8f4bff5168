#!/usr/bin/env bash
# Writes a clusterctl local repository for virtpod into $1, plus $1/clusterctl.yaml, a clusterctl
# configuration that points the "virtpod" infrastructure provider at it (docs/capi.md):
#   $1/infrastructure-virtpod/<version>/{infrastructure-components.yaml,metadata.yaml,cluster-template*.yaml}
# infrastructure-components.yaml is config/capi rendered by kustomize (kubectl kustomize).
set -euo pipefail
out=${1:?usage: clusterctl-repo.sh DIR}
version=${CLUSTERCTL_REPO_VERSION:-v0.1.0}  # not VIRTPOD_RELEASE: the e2e tests name a release folder with that
kubectl=${KUBECTL:-kubectl}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$out/infrastructure-virtpod/$version
mkdir -p "$dir"
"$kubectl" kustomize "$root/config/capi" >"$dir/infrastructure-components.yaml"
cp "$root/config/clusterctl/metadata.yaml" "$root"/config/clusterctl/templates/cluster-template*.yaml "$root"/config/clusterctl/templates/clusterclass-*.yaml "$dir/"
out=$(cd "$out" && pwd)
cat >"$out/clusterctl.yaml" <<CFG
providers:
- name: virtpod
  type: InfrastructureProvider
  url: $out/infrastructure-virtpod/$version/infrastructure-components.yaml
CFG
echo "clusterctl repository for virtpod $version in $out; use --config $out/clusterctl.yaml"
