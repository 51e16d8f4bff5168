package boot

import "testing"

func TestKernelCmdline(t *testing.T) {
	for _, tc := range []struct{ user, ip, want string }{
		{"", "", "console=ttyS0 root=/dev/vda no_timer_check"},
		{"rw quiet", "ip=10.0.0.2::10.0.0.1:255.255.255.0:vm:eth0:off", "console=ttyS0 root=/dev/vda no_timer_check rw quiet ip=10.0.0.2::10.0.0.1:255.255.255.0:vm:eth0:off"},
		// The VM's own choices win.
		{"console=hvc0 root=/dev/vda1 ip=dhcp", "ip=10.0.0.2::10.0.0.1:255.255.255.0:vm:eth0:off", "no_timer_check console=hvc0 root=/dev/vda1 ip=dhcp"},
		{"no_timer_check", "", "console=ttyS0 root=/dev/vda no_timer_check"},
		// "rootwait" is not root=.
		{"rootwait", "", "console=ttyS0 root=/dev/vda no_timer_check rootwait"},
	} {
		if got := Cmdline(tc.user, tc.ip, false); got != tc.want {
			t.Errorf("Cmdline(%q, %q) = %q, want %q", tc.user, tc.ip, got, tc.want)
		}
	}
}

// TestKernelCmdlineHotplugMemory: a guest with hotpluggable memory onlines it in the kernel,
// movable where the ratio allows, unless the VM's own arguments choose otherwise.
func TestKernelCmdlineHotplugMemory(t *testing.T) {
	for user, want := range map[string]string{
		"rw":                                 "console=ttyS0 root=/dev/vda no_timer_check rw memhp_default_state=online memory_hotplug.online_policy=auto-movable",
		"memhp_default_state=online_movable": "console=ttyS0 root=/dev/vda no_timer_check memhp_default_state=online_movable",
	} {
		if got := Cmdline(user, "", true); got != want {
			t.Errorf("Cmdline(%q, hotplug) = %q, want %q", user, got, want)
		}
	}
}
