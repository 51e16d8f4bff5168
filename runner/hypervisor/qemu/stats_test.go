package qemu

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/virtpod/virtpod/pkg/controlapi"
	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
)

// blockstatsJSON is query-blockstats as QEMU 7.2 answers it (trimmed), for a UEFI guest with a
// data disk while an NBD export of its root runs: the firmware's flash and the export's
// anonymous backend are no disks of the guest's; the counters are the backend's own ("stats"),
// not its file's ("parent"), and the listing is not in the guest's order.
const blockstatsJSON = `[
 {"device": "pflash0", "qdev": "/machine/system.flash0", "stats": {"rd_bytes": 0, "wr_bytes": 0, "rd_operations": 0, "wr_operations": 0}},
 {"device": "disk-data", "qdev": "/machine/peripheral-anon/device[2]/virtio-backend",
  "stats": {"rd_bytes": 4096, "wr_bytes": 8388608, "rd_operations": 1, "wr_operations": 64, "flush_operations": 2},
  "parent": {"stats": {"rd_bytes": 1, "wr_bytes": 2, "rd_operations": 3, "wr_operations": 4}}},
 {"device": "", "node-name": "#block512", "stats": {"rd_bytes": 999, "wr_bytes": 999, "rd_operations": 9, "wr_operations": 9}},
 {"device": "root", "qdev": "/machine/peripheral-anon/device[0]/virtio-backend",
  "stats": {"rd_bytes": 31457280, "wr_bytes": 1048576, "rd_operations": 700, "wr_operations": 30},
  "parent": {"stats": {"rd_bytes": 5, "wr_bytes": 6, "rd_operations": 7, "wr_operations": 8}}}
]`

// TestDiskStatsMapsDrives: the guest's disks, by the drive ids the driver gave them, in the
// guest's order, with the backend's counters; a drive QEMU does not list is left out.
func TestDiskStatsMapsDrives(t *testing.T) {
	var raw []blockStats
	if err := json.Unmarshal([]byte(blockstatsJSON), &raw); err != nil {
		t.Fatal(err)
	}
	q := &VM{spec: qemuargs.Spec{SeedPath: "/state/cidata.iso", Disks: []qemuargs.Drive{{Serial: "data"}, {Serial: "gone"}}}}
	if d := q.drives(); !reflect.DeepEqual(d, []string{"root", "cidata", "disk-data", "disk-gone"}) {
		t.Fatalf("drives %q", d)
	}
	got := diskStats(q.drives(), raw)
	want := []controlapi.DiskStats{
		{Drive: "root", ReadBytes: 31457280, WriteBytes: 1048576, ReadOps: 700, WriteOps: 30},
		{Drive: "disk-data", ReadBytes: 4096, WriteBytes: 8388608, ReadOps: 1, WriteOps: 64},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("disk stats\n got %+v\nwant %+v", got, want)
	}
}
