package runner

import (
	"fmt"
	"os"
	"strings"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// Exit codes; the termination message says the same in words.
const (
	ExitOK               = 0 // the guest powered off (by itself or after SIGTERM)
	ExitError            = 1 // invalid configuration or the guest could not be prepared
	ExitProviderMissing  = 2 // the hypervisor binary is not in the image
	ExitKVMUnusable      = 3 // acceleration kvm, but KVM cannot run a guest here
	ExitHypervisorFailed = 4 // the hypervisor crashed or was killed
	ExitGraceExpired     = 5 // the guest ignored the power button for the grace period
	ExitGuestPanicked    = 6 // the guest kernel panicked
	ExitNoBootableDisk   = 7 // booting through firmware, the root disk had nothing to boot
	ExitRootDiskUnusable = 8 // the VM image's /disk has no root disk, several, or one in a format the runner cannot boot
	ExitIncomingFailed   = 9 // a migration target's guest never arrived: the stream failed or the runner was stopped first
)

// MessageMigrated is the termination message of a source runner whose guest moved away.
const MessageMigrated = "guest migrated to another pod"

// MessageSuspended, followed by the state's path, is the termination message of a runner whose
// guest was suspended: its state is saved there, for a runner with --resume-from. The
// controller reads it (vmv1.MessageSuspended).
const MessageSuspended = vmv1.MessageSuspended

// Outcome is how a run ended.
type Outcome struct {
	Code    int
	Message string
}

// fail is the outcome of a step that failed with err, its message led by what failed, if said.
func fail(code int, err error, what ...string) *Outcome {
	msg := err.Error()
	if len(what) > 0 {
		msg = what[0] + ": " + msg
	}
	return &Outcome{Code: code, Message: msg}
}

func failf(code int, format string, args ...any) Outcome {
	return Outcome{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WriteTerminationMessage writes the message where the kubelet reads it
// (terminationMessagePath), keeping within its 4096-byte limit.
func WriteTerminationMessage(path, msg string) error {
	if path == "" {
		return nil
	}
	if len(msg) > 4096 {
		msg = msg[:4093] + "..."
	}
	return os.WriteFile(path, []byte(msg), 0o644)
}

// noBootableOutcome is the run's end when the firmware found nothing to boot.
func noBootableOutcome(cfg runnerconfig.Config, line string) Outcome {
	// OVMF's line ends in a device path nobody needs to read.
	if i := strings.Index(line, " from Fv("); i > 0 {
		line = line[:i]
	}
	return failf(ExitNoBootableDisk, "the root disk has no bootloader (the %s firmware found nothing to boot: %s): use a bootable image, or set guest.kernelImage",
		strings.ToUpper(cfg.Firmware), line)
}
