#!/usr/bin/env bash
# `make demo RELEASE_DIR`, after `make cluster-up` and `make release-assets` into the cluster's
# registry: install virtpod from that release as a user would (install.yaml with the images by
# digest, plus the local cluster's settings; tools/dev/install-release.sh), apply the sample VM,
# wait until it runs, and show it, with its ConfigMap share edited live. GUEST=debian runs the Debian cloud
# guest (config/samples/debian) instead of the quick test guest, and ends with cloud-init's final
# message on its console.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${KUBECTL:?set by make demo}" "${KUBECONFIG:?set by make demo}"
GUEST=${GUEST:-test}
k() { "$KUBECTL" "$@"; }
# screen saves the VM's screen as a PNG with vmctl screenshot (through the pod's exec).
screen() {
	local out=${TMPDIR:-/tmp}/virtpod-demo-$1.png
	echo "== the guest's screen (vmctl screenshot $1 -o $out)"
	go run ./tools/vmctl screenshot "$1" -o "$out"
}
case $GUEST in
test) sample=config/samples vm=demo boot=300s ;;
debian) sample=config/samples/debian vm=debian boot=900s ;;
*) echo "GUEST=$GUEST: want test (the default) or debian" >&2; exit 2 ;;
esac

release=${1:?usage: demo.sh RELEASE_DIR}
echo "== installing virtpod from $release (kubectl apply --server-side, images from the cluster's registry)"
tools/dev/install-release.sh "$release"

echo "== the VM's namespace enforces Pod Security restricted: runner pods need nothing more"
k label namespace default pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest --overwrite >/dev/null

echo "== applying the sample VM ($sample)"
k apply -k $sample
if ! k wait --for=jsonpath='{.status.phase}'=Running vm/$vm --timeout=$boot >/dev/null; then
	echo "the VM did not reach Running; what it says:" >&2
	k get vm $vm -o yaml >&2
	k describe pod $vm-runner >&2 || true
	exit 1
fi

if [ "$GUEST" = debian ]; then
	echo "== waiting for cloud-init's final message on the guest's console (emulated: minutes)"
	for _ in $(seq 1 900); do
		k logs debian-runner 2>/dev/null | grep -q 'cloud-init final' && break
		sleep 1
	done
	echo
	k get vm -o wide
	echo
	echo "== the guest's console (kubectl logs debian-runner): DHCP, cloud-init, login prompt"
	k logs debian-runner | grep -E '"msg":"dhcp answer"|ci-info: \|  *eth0|Cloud-init v\.|cloud-init final|login:' | tail -n 12
	k logs debian-runner | grep -q 'cloud-init final' || { echo "cloud-init did not finish in 15 minutes" >&2; exit 1; }
	screen debian
	cat <<EOM

The Debian guest runs in pod debian-runner at the VM's IP. To log in, put your public key in
config/samples/debian/user-data.yaml and apply it again with a new VM (cloud-init adds users once
per instance, and the instance is the VM's UID: kubectl delete vm debian; kubectl apply -k
config/samples/debian), then:
  export KUBECONFIG=$KUBECONFIG
  vmctl ssh debian --user debian      # make install puts vmctl in /usr/local/bin
  vmctl console debian
Stop everything with: make demo-down
EOM
	exit 0
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
screen demo

# The share: the guest serves the ConfigMap demo-conf under /conf, and an edit of it reaches
# the running guest (virtio-fs, on the default runner) within the kubelet's sync period. Asked
# from this machine, which reaches the pod network, with bash's /dev/tcp (no curl needed).
ip=$(k get vm demo -o jsonpath='{.status.podIP}')
get() {
	exec 3<>"/dev/tcp/$ip/80" || return 1
	printf 'GET %s HTTP/1.0\r\nHost: demo\r\n\r\n' "$1" >&3
	sed '1,/^\r*$/d' <&3
	exec 3<&-
}
served() { # served PATH WANT SECONDS: waits until the guest serves WANT at PATH
	for _ in $(seq 1 "$3"); do
		[ "$(get "$1" 2>/dev/null)" = "$2" ] && return 0
		sleep 1
	done
	echo "the guest did not serve '$2' at $1 in $3 s; it serves: $(get "$1" 2>&1)" >&2
	return 1
}
echo
echo "== the ConfigMap demo-conf, shared into the guest: http://$ip/conf/message"
served /conf/message "hello from a ConfigMap" 60
echo "  $(get /conf/message)"
msg="edited at $(date +%T)"
echo "== kubectl patch configmap demo-conf: message=\"$msg\" (no restart)"
k patch configmap demo-conf --type=merge -p "{\"data\":{\"message\":\"$msg\"}}" >/dev/null
t0=$(date +%s)
served /conf/message "$msg" 120
echo "  $(get /conf/message)   (after $(($(date +%s) - t0)) s)"
k patch configmap demo-conf --type=merge -p '{"data":{"message":"hello from a ConfigMap"}}' >/dev/null

cat <<EOM

The VM runs in pod demo-runner and answers at its IP (kubectl get vm demo -o wide).
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$KUBECTL
  kubectl get vm,pods -o wide
  kubectl describe vm demo
  kubectl edit configmap demo-conf     # the guest serves the edit at http://$ip/conf/message
Stop everything with: make demo-down
EOM
