package runner

import (
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

func TestNoBootableOutcome(t *testing.T) {
	out := noBootableOutcome(runnerconfig.Config{Firmware: runnerconfig.FirmwareBIOS}, "No bootable device.")
	if out.Code != ExitNoBootableDisk || !strings.Contains(out.Message, "the root disk has no bootloader") ||
		!strings.Contains(out.Message, "use a bootable image, or set guest.kernelImage") || !strings.Contains(out.Message, "BIOS") {
		t.Fatalf("outcome %+v", out)
	}
}
