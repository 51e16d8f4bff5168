package v1alpha1

// Display is the guest's display: what `vmctl vnc` and `vmctl screenshot` see.
// +kubebuilder:validation:Enum=VNC;None
type Display string

// Displays.
const (
	// DisplayVNC is a standard VGA card (text mode for SeaBIOS and a kernel's console, the
	// framebuffer of OVMF and Linux's bochs driver), served over VNC on a unix socket inside
	// the runner pod, reached only through the pod's exec.
	DisplayVNC Display = "VNC"
	// DisplayNone gives the guest no graphics card.
	DisplayNone Display = "None"
)

// DisplayOverheadMiB is the memory the runner pod gets for a guest's display beyond the guest:
// the VGA card's video memory (QEMU's vgamem_mb, which the runner sets to it), which QEMU
// allocates outside the guest's RAM.
const DisplayOverheadMiB = 16
