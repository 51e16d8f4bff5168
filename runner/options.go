package runner

import (
	"io"
	"os"
	"time"

	"go.uber.org/zap"
)

// Options are the runner's own settings, as opposed to the VM's configuration.
type Options struct {
	QEMUBinary            string
	QEMUImgBinary         string
	CloudHypervisorBinary string
	VirtiofsdBinary       string // serves --filesystem shares; only needed when there are some
	KVMDevice             string
	// SkipKVMProbe leaves only the boot watchdog to catch a KVM that cannot run guests.
	SkipKVMProbe bool
	CPUModel     string // QEMU -cpu; "" for the default
	ResolvConf   string
	// BootWatchdog: under kvm, a guest that prints nothing on its console for this long is
	// taken as one KVM cannot run. 0 disables it.
	BootWatchdog time.Duration
	Stdout       io.Writer // the guest console
	// Launcher, when set, is put in front of QEMU's argv: the runner's own exec-unprivileged
	// command, which starts QEMU without capabilities (see dropcaps.Exec).
	Launcher []string
	Log      *zap.Logger
	Signals  <-chan os.Signal
	prepared func() // ends stopWhilePreparing's watch, as the hypervisor starts
	// ResizeTimeout bounds how long a resize waits for the guest; 0 is DefaultResizeTimeout.
	ResizeTimeout time.Duration
}

// Files the runner keeps in the state directory.
const (
	qmpSocketName    = "qmp.sock"
	serialSocketName = "serial.sock"
	chAPISocketName  = "cloud-hypervisor.sock"
)
