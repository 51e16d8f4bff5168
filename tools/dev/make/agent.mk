# The node agent (docs/node-agent.md): its wing agent/ (the node report, the device plugin, the
# executors) and its command. Included from the top Makefile. It ships in the runner image (make
# image-runner).
AGENT_BIN ?= bin/virtpod-agent
# The wing, its command and the KVM probe it shares with the runner; every package of them, so
# an executor added to agent/ is tested here too.
AGENT_TEST_PKGS := ./agent/... ./cmd/virtpod-agent/... ./runner/kvm/...

.PHONY: test-agent build-agent agent-probe

test-agent: runner-deps control-plane ## Node agent tests: the probe on this machine, the device plugin with a fake kubelet, the executors on a real API server.
	$(ENVTEST_ENV) go test -count=1 -timeout 10m $(AGENT_TEST_PKGS)

build-agent: ## Build the node agent binary into $(AGENT_BIN).
	CGO_ENABLED=0 go build -trimpath -o $(AGENT_BIN) ./cmd/virtpod-agent

agent-probe: ## Probe this machine as the agent does and print the result.
	go run ./cmd/virtpod-agent probe
