package boot

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/virtpod/virtpod/pkg/disk/cloudinit"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// seedName is the cloud-init seed image in the state directory. It is built at every start from
// the files the kubelet mounted from the VM's Secret, so a changed Secret reaches the guest at
// its next start.
const seedName = "cidata.iso"

// Seed builds the NoCloud seed the configuration asks for and returns its path, or "" when
// the VM has none. The data is read from files and never logged.
func Seed(cfg runnerconfig.Config) (string, error) {
	if cfg.CloudInitUserData == "" {
		return "", nil
	}
	user, err := os.ReadFile(cfg.CloudInitUserData)
	if err != nil {
		return "", fmt.Errorf("--cloud-init-user-data: %w", err)
	}
	var network []byte
	if cfg.CloudInitNetworkData != "" {
		if network, err = os.ReadFile(cfg.CloudInitNetworkData); err != nil {
			return "", fmt.Errorf("--cloud-init-network-data: %w", err)
		}
	}
	path := filepath.Join(cfg.StateDir, seedName)
	seed := cloudinit.Seed{InstanceID: cfg.InstanceID, Hostname: cfg.Name, UserData: user, NetworkConfig: network}
	if err := cloudinit.Write(path, seed); err != nil {
		return "", fmt.Errorf("--instance-id/--name: %w", err)
	}
	return path, nil
}
