package runnerconfig

import "fmt"

// Displays the guest can have (--display).
const (
	// DisplayVNC gives the guest a standard VGA card, whose screen QEMU serves over VNC on a
	// unix socket in the state directory (never a TCP port) and captures for screenshots.
	DisplayVNC = "vnc"
	// DisplayNone gives the guest no display: the flag's default, so a pod made before the flag
	// existed (and a migration target copying its flags) keeps a guest without one.
	DisplayNone = "none"
)

// DisplayFlag is Display's flag.
const DisplayFlag = "--display"

// validateDisplay checks --display against the provider.
func (c *Config) validateDisplay() []error {
	switch c.Display {
	case DisplayNone, "": // "" before Defaults: none
	case DisplayVNC:
		if c.Provider != ProviderQEMU {
			return []error{fmt.Errorf("%s=%s: only for provider %s (cloud-hypervisor has no VNC server); use %s=%s", DisplayFlag, DisplayVNC, ProviderQEMU, DisplayFlag, DisplayNone)}
		}
	default:
		return []error{fmt.Errorf("%s: %q is not a display; use %s or %s", DisplayFlag, c.Display, DisplayVNC, DisplayNone)}
	}
	return nil
}
