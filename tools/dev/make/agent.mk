# The node agent (docs/node-agent.md): probe, device plugin, publisher and the command.
# Included from the top Makefile. It ships in the runner image (make image-runner).
AGENT_BIN ?= bin/virtpod-agent
AGENT_TEST_PKGS := ./runner/agent/... ./runner/deviceplugin/... ./runner/kvm/... ./runner/cmd/virtpod-agent/...

.PHONY: test-agent build-agent agent-probe

test-agent: runner-deps ## Node agent unit tests: the probe on this machine, the device plugin with a fake kubelet.
	go test -count=1 -timeout 5m $(AGENT_TEST_PKGS)

build-agent: ## Build the node agent binary into $(AGENT_BIN).
	CGO_ENABLED=0 go build -trimpath -o $(AGENT_BIN) ./runner/cmd/virtpod-agent

agent-probe: ## Probe this machine as the agent does and print the result.
	go run ./runner/cmd/virtpod-agent probe
