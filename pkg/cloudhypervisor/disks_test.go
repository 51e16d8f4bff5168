package cloudhypervisor

import (
	"strings"
	"testing"
)

// TestDataDisksGolden: data disks follow the seed, each with its serial.
func TestDataDisksGolden(t *testing.T) {
	s := baseSpec()
	s.SeedPath = "/var/run/virtpod/cidata.iso"
	s.Disks = []DataDisk{
		{Serial: "data", Path: "/virtpod/disks/data/disk.img", DirectIO: true},
		{Serial: "raw", Path: "/dev/virtpod/raw", DirectIO: true},
		{Serial: "tools", Path: "/virtpod/disks/tools/disk/root.img", Qcow2: true, ReadOnly: true},
	}
	c, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "data-disks", c)
}

func TestDataDisksRefused(t *testing.T) {
	for want, d := range map[string]DataDisk{
		"never qcow2":        {Serial: "a", Path: "/a", Qcow2: true},
		"unique DNS label":   {Serial: "A_B", Path: "/a"},
		"required, in UTF-8": {Serial: "a", Path: "/\xff"},
	} {
		s := baseSpec()
		s.Disks = []DataDisk{d}
		if _, err := Build(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error with %q", d, err, want)
		}
	}
}
