package nodeagent

import (
	"os"
	"os/exec"

	"github.com/virtpod/virtpod/pkg/dropcaps"
	"github.com/virtpod/virtpod/pkg/kernel/kernelcache"
)

// UnpackKernelCommand is the agent's subcommand that is its kernel store's child process.
const UnpackKernelCommand = "unpack-kernel"

// kernelCache is the store of PVH kernels in dir. The bzImages are the pods', so hostile: each
// is unpacked by a child process (UnpackKernel), which the OOM killer takes before the agent.
func kernelCache(dir string) (*kernelcache.Cache, error) {
	kc, err := kernelcache.New(dir, 0, 0)
	if err != nil {
		return nil, err
	}
	kc.Unpacker = func() *exec.Cmd { return exec.Command("/proc/self/exe", UnpackKernelCommand) }
	return kc, nil
}

// UnpackKernel is the child process of the agent's kernel store. The bzImage is a pod's, so it
// first gives up the agent's capabilities (re-executing itself through dropcaps, which keeps
// descriptors 3 and 4), then unpacks as a process the OOM killer takes first.
func UnpackKernel() error {
	held, err := dropcaps.Held()
	if err != nil {
		return err
	}
	if held {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		return dropcaps.Exec([]string{exe, UnpackKernelCommand}) // returns only on failure
	}
	os.Exit(kernelcache.UnpackerMain())
	return nil
}
