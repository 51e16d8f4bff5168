# The runner: its guest fixture, tests, boot benchmark and binary. Included from the top Makefile.
VIRTPOD_CACHE ?= $(HOME)/.cache/virtpod
GUEST_FIXTURE ?= $(VIRTPOD_CACHE)/guest
DEBIAN_GUEST  ?= $(VIRTPOD_CACHE)/debian-guest
# The next QEMU (Debian 13's 10.0), runnable here, for migrations across QEMU versions.
QEMU_NEXT     ?= $(VIRTPOD_CACHE)/qemu-next
RUNNER_BIN    ?= bin/virtpod-runner
BENCH_PAIRS   ?= 5
# The Debian guest's firmware boot in bench-boot: which firmwares (empty: skip it), how many pairs.
BENCH_FIRMWARE     ?= bios,uefi
BENCH_DEBIAN_PAIRS ?= 3

# The runner and every package of the module it links (from go list, so none is left out), less
# those whose tests need an API server (test-controller's), and the guest builders; the node
# agent's packages are test-agent's (agent.mk).
RUNNER_BINS := ./cmd/virtpod-runner ./cmd/vmcopy
RUNNER_TEST_PKGS = $(shell go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' $(RUNNER_BINS) | grep '^github.com/virtpod/virtpod/' | \
	xargs go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' | awk '!/ github.com\/virtpod\/virtpod\/tests\/kubeapi( |$$)/ {print $$1}') \
	./tools/dev/guestfixture/... ./tools/dev/debianguest/... ./tools/dev/benchboot/...

.PHONY: runner-deps guest-fixture debian-guest qemu-next test-runner bench-boot bench-resize bench-migrate bench-suspend build-runner

runner-deps: ## Install the Debian packages the runner tests need (no-op when present; root to install).
	bash tools/dev/ci/install-deps.sh

guest-fixture: runner-deps ## Build the test guest (Debian cloud kernel, busybox initramfs, ext4 root) into $(GUEST_FIXTURE).
	go run ./tools/dev/guestfixture -out $(GUEST_FIXTURE)

debian-guest: runner-deps ## Build the Debian cloud guest (a disk that boots through UEFI and BIOS) from Debian's packages into $(DEBIAN_GUEST).
	go run ./tools/dev/debianguest -out $(DEBIAN_GUEST)

qemu-next: runner-deps ## Build Debian 13's QEMU 10.0 into $(QEMU_NEXT), run here through its own libraries (bin/qemu-system-x86_64).
	go run ./tools/dev/qemunext -out $(QEMU_NEXT)

test-runner: guest-fixture debian-guest qemu-next ## Run the runner's tests, booting real guests under TCG.
	VIRTPOD_GUEST=$(GUEST_FIXTURE) VIRTPOD_DEBIAN_GUEST=$(DEBIAN_GUEST) VIRTPOD_QEMU_NEXT=$(QEMU_NEXT) go test -count=1 -timeout 30m $(RUNNER_TEST_PKGS)

bench-boot: guest-fixture debian-guest ## Runner vs plain QEMU in alternating pairs: the test guest to its marker, the Debian guest through firmware to cloud-init's final message (root).
	go run ./tools/dev/benchboot -guest $(GUEST_FIXTURE) -pairs $(BENCH_PAIRS) \
		$(if $(BENCH_FIRMWARE),-debian $(DEBIAN_GUEST) -firmware $(BENCH_FIRMWARE) -debian-pairs $(BENCH_DEBIAN_PAIRS))

bench-resize: guest-fixture ## Live resize of the test guest under TCG: PUT to the guest seeing new vCPUs and memory, heartbeat gap (root).
	VIRTPOD_GUEST=$(GUEST_FIXTURE) go test -count=1 -run '^$$' -bench BenchmarkResize -benchtime=1x ./runner/

build-runner: ## Build the runner binary into $(RUNNER_BIN).
	CGO_ENABLED=0 go build -trimpath -o $(RUNNER_BIN) ./cmd/virtpod-runner

bench-migrate: guest-fixture ## Live migration of the test guest under TCG (256Mi and 1Gi, three hops each): QEMU's total time and downtime, the guest's heartbeat gap (root).
	VIRTPOD_GUEST=$(GUEST_FIXTURE) go test -count=1 -run '^$$' -bench BenchmarkMigrate -benchtime=1x -timeout 20m ./runner/

bench-suspend: guest-fixture ## Suspend of the test guest to a file and its resume in a new runner under TCG (256Mi and 1Gi, three cycles each): suspend time, state size, load time, runner start to running (root).
	VIRTPOD_GUEST=$(GUEST_FIXTURE) go test -count=1 -run '^$$' -bench BenchmarkSuspend -benchtime=1x -timeout 20m ./runner/

.PHONY: bench-hotplug
bench-hotplug: guest-fixture ## Disk hotplug of the test guest under TCG: a 64 MiB disk qemu-nbd serves attached (PUT /v1/hotplug to the guest's report of it) and detached (PUT to DEVICE_DELETED), five times: medians and maxima (root).
	VIRTPOD_GUEST=$(GUEST_FIXTURE) go test -count=1 -run '^$$' -bench BenchmarkHotplug -benchtime 1x -timeout 10m ./runner/

.PHONY: bench-snapshot
bench-snapshot: guest-fixture ## Backups of the test guest's 1 GiB data disk under TCG, pushed over NBD to qemu-nbd (PUT /v1/backup): full, incremental with nothing changed, incremental after 8 MiB written: bytes copied and seconds (root).
	VIRTPOD_GUEST=$(GUEST_FIXTURE) VIRTPOD_QEMU_NEXT=$(QEMU_NEXT) VIRTPOD_DEBIAN_GUEST=$(DEBIAN_GUEST) go test -count=1 -run '^$$' -bench BenchmarkSnapshot -benchtime 1x -timeout 20m ./runner/
