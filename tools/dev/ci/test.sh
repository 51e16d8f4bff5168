#!/usr/bin/env bash
# `make test`: every build step, then every package on a real API server, real guests and the
# local cluster, then a timing report (docs/ci.md). Steps that only wait on the network (module
# and Debian package downloads, the guest fixtures) run beside the first compiles; everything
# CPU-bound runs one at a time, since the machine has two cores and each Go build uses both.
#
# The report goes to stdout at the end and to $VIRTPOD_CI_REPORT (default
# $VIRTPOD_CACHE/ci-report.txt); the raw step timings and boot counts to $VIRTPOD_CI_DIR.
set -uo pipefail
cd "$(dirname "$0")/../../.."

MAKE=${MAKE:-make}
m() { "$MAKE" --no-print-directory "$@"; }
cache=$(m -s print-VIRTPOD_CACHE)
export VIRTPOD_CI_DIR=${VIRTPOD_CI_DIR:-$cache/ci}
report=${VIRTPOD_CI_REPORT:-$cache/ci-report.txt}
rm -rf "$VIRTPOD_CI_DIR" && mkdir -p "$VIRTPOD_CI_DIR" || exit 1
steps=$VIRTPOD_CI_DIR/steps.tsv
start=$(date +%s)

# state PATH...: "cached" when every path exists before the step runs, else "cold".
state() {
	local p
	for p in "$@"; do [ -e "$p" ] || { echo cold; return; }; done
	echo cached
}

# record NAME STATE T0 RC: one line of steps.tsv, the wall time in milliseconds since T0 (ns).
record() {
	printf '%s\t%s\t%d\t%s\n' "$1" "$2" $((($(date +%s%N) - $3) / 1000000)) "$4" >>"$steps"
}

# step NAME STATE CMD...: runs CMD and records its wall time; a failed step ends the run (in the
# background group, it ends that group, and the wait below ends the run).
step() {
	local name=$1 st=$2 t0 rc
	shift 2
	echo "==> $name ($st)"
	t0=$(date +%s%N)
	"$@"
	rc=$?
	record "$name" "$st" "$t0" "$rc"
	if [ $rc -ne 0 ]; then
		echo "==> $name failed (exit $rc)"
		[ "${BASH_SUBSHELL}" -gt 0 ] && exit $rc
		finish $rc
	fi
}

finish() {
	local rc=$1
	: >"$VIRTPOD_CI_DIR/binaries.abort" # a node-image step still waiting gives up
	wait 2>/dev/null
	go run ./tools/dev/ci/report -steps "$steps" -background "$VIRTPOD_CI_DIR/background.tsv" -tests "$VIRTPOD_CI_DIR/go-test.log" -times "$VIRTPOD_CI_DIR/test-times.tsv" \
		-boots "$VIRTPOD_CI_DIR" -total $(($(date +%s) - start)) -out "$report" || rc=1
	exit "$rc"
}

v() { m -s "print-$1"; }
K8S_BIN=$(v K8S_BIN) ETCD_BIN=$(v ETCD_BIN) CAPI_DIR=$(v CAPI_DIR)
GUEST_FIXTURE=$(v GUEST_FIXTURE) DEBIAN_GUEST=$(v DEBIAN_GUEST) IMAGES_DIR=$(v IMAGES_DIR) QEMU_NEXT=$(v QEMU_NEXT)
NODE_IMAGE_DIR=$(v NODE_IMAGE_DIR)
binaries_done=$VIRTPOD_CI_DIR/binaries.done

# node_image waits for the kubelet, kubeadm and containerd the main steps build, then builds the
# Kubernetes node image (mostly downloads and dpkg, so it runs beside the Cluster API build).
node_image() {
	until [ -e "$binaries_done" ]; do
		[ -e "$VIRTPOD_CI_DIR/binaries.abort" ] && return 1
		sleep 2
	done
	m node-image
}

# Beside the first compiles: every tool module's sources, the Debian packages, both guests.
bg_log=$VIRTPOD_CI_DIR/background.log
(
	steps=$VIRTPOD_CI_DIR/background.tsv
	step downloads - m download-modules
	step runner-deps "$(state /usr/bin/qemu-system-x86_64 /usr/bin/mmdebstrap)" m runner-deps
	step guest-fixture "$(state "$GUEST_FIXTURE")" m guest-fixture
	step debian-guest "$(state "$DEBIAN_GUEST")" m debian-guest
	step qemu-next "$(state "$QEMU_NEXT/qemu.json")" m qemu-next
	step node-image "$(state "$NODE_IMAGE_DIR/image.json" "$IMAGES_DIR/node.tar")" node_image
) >"$bg_log" 2>&1 &
bg=$!

step verify-generated - m verify-generated
step vet - m vet
step k8s-binaries "$(state "$K8S_BIN/kubelet" "$K8S_BIN/kubeadm" "$ETCD_BIN/etcd")" m k8s-binaries
# The rest of cluster-binaries; its runner-deps is the background group's.
step containerd-registry "$(state "$(v CONTAINERD_BIN)/containerd" "$(v REGISTRY_BIN)/registry")" m containerd registry
: >"$binaries_done"
step capi "$(state "$CAPI_DIR/cluster-api-manager" "$CAPI_DIR/clusterctl")" m capi
wait $bg
bg_rc=$?
echo "==> background steps (downloads, runner-deps, guest-fixture, debian-guest, qemu-next, node-image):"
cat "$bg_log"
[ $bg_rc -eq 0 ] || finish $bg_rc
step test-images "$(state "$IMAGES_DIR/debian.tar" "$IMAGES_DIR/tenant-control-plane.tar")" m test-images
# Each image is built by one single-threaded imagebuild (layer tars and gzip) and nothing else
# runs now: two at a time take 38 s instead of 68 s on two cores.
step images - m -j2 images

was_up=no
go run ./tools/dev/localcluster status --quiet 2>/dev/null && was_up=yes
step cluster-up - m cluster-start
step e2e-releases - m e2e-releases

t0=$(date +%s%N)
echo "==> go test ./..."
# -json, turned back into go test's plain output by testlog, which also keeps each test's time
# for the report's slowest tests. tests/e2e, the longest package by far, is named first so it
# starts first, instead of after most of them alphabetically: the run no longer waits for e2e
# alone at its end. -p 3: e2e holds one slot for its whole run, and with go test's default (2 on
# two cores) every other package ran one at a time in the other, as long as e2e itself; most of
# them wait on their API servers and guests rather than compute. go test prints packages in the
# order named, so the rest shows once e2e is done.
go build -o "$VIRTPOD_CI_DIR/testlog" ./tools/dev/ci/testlog || finish 1
env $(m -s print-TEST_ENV) go test -json -count=1 -p 3 -timeout 45m ./tests/e2e/ $(go list ./... | grep -vx 'github.com/virtpod/virtpod/tests/e2e') 2>&1 |
	"$VIRTPOD_CI_DIR/testlog" -times "$VIRTPOD_CI_DIR/test-times.tsv" | tee "$VIRTPOD_CI_DIR/go-test.log"
rc=${PIPESTATUS[0]}
record go-test - "$t0" "$rc"
if [ $was_up = no ]; then
	t0=$(date +%s%N)
	go run ./tools/dev/localcluster down
	down=$?
	record cluster-down - "$t0" "$down"
	[ $down -eq 0 ] || rc=1
fi
finish $rc
