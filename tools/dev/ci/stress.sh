#!/usr/bin/env bash
# `make test-stress`: the packages that run real clusters and guests, run again and again with
# both cores kept busy by stress-ng, to find the tests that fail only on a loaded machine (CI
# runs beside nothing, but its own packages load it). It needs what `make test` builds, and
# builds what is missing the same way (warm, each step is a cache check); then it starts the
# local cluster, runs the packages STRESS_RUNS times under load, and prints each test's pass
# count with the cause of every failure (tools/dev/ci/passcount). docs/ci.md holds the figures.
#
#   STRESS_RUNS   how many runs (default 3)
#   STRESS_PKGS   the packages (default: tests/e2e tests/faults runner tests/capi)
#   STRESS_RUN    go test -run pattern (default: every test)
#   STRESS_CPU    stress-ng CPU workers beside the tests (default: one per core; 0: no load)
#   STRESS_NICE   the workers' nice value (default 0: they compete with the tests as equals)
set -uo pipefail
cd "$(dirname "$0")/../../.."

MAKE=${MAKE:-make}
m() { "$MAKE" --no-print-directory "$@"; }
runs=${STRESS_RUNS:-3}
pkgs=${STRESS_PKGS:-./tests/e2e/ ./tests/faults/ ./runner/ ./tests/capi/}
pattern=${STRESS_RUN:-.}
cpus=${STRESS_CPU:-$(nproc)}
out=$(m -s print-VIRTPOD_CACHE)/stress/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" || exit 1

if [ "$cpus" -gt 0 ] && ! command -v stress-ng >/dev/null; then
	apt-get install -y -q stress-ng >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q stress-ng >/dev/null; } || exit 1
fi
# What make test builds before its tests, each step a no-op when cached.
m runner-deps guest-fixture debian-guest qemu-next k8s-binaries containerd registry capi test-images images || exit 1
was_up=no
go run ./tools/dev/localcluster status --quiet 2>/dev/null && was_up=yes
m cluster-start e2e-releases || exit 1
go build -o "$out/passcount" ./tools/dev/ci/passcount || exit 1

load=
if [ "$cpus" -gt 0 ]; then
	nice -n "${STRESS_NICE:-0}" stress-ng --cpu "$cpus" --cpu-method matrixprod --quiet &
	load=$!
	trap '[ -n "$load" ] && kill $load 2>/dev/null' EXIT
fi
echo "==> $runs runs of $pkgs (-run '$pattern'), $cpus stress-ng CPU workers beside them; output in $out"
for i in $(seq 1 "$runs"); do
	t0=$(date +%s)
	# shellcheck disable=SC2086 # the packages are words
	env $(m -s print-TEST_ENV) go test -json -count=1 -p 3 -timeout 45m -run "$pattern" $pkgs >"$out/run$i.json" 2>&1
	echo "run $i: exit $?, $(($(date +%s) - t0)) s"
done
[ -n "$load" ] && kill "$load" 2>/dev/null
load=
[ $was_up = no ] && go run ./tools/dev/localcluster down
"$out/passcount" "$out"/run*.json | tee "$out/passcount.txt"
