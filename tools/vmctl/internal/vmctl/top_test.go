package vmctl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// agentScrape is a node agent's /metrics with three VMs, as agent/vmstats writes it: web's CPU,
// its two disks' written bytes and its received bytes as given.
func agentScrape(cpu, written, rx float64) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return `# HELP virtpod_vm_stats_up 1 when the VM's runner answered.
# TYPE virtpod_vm_stats_up gauge
virtpod_vm_stats_up{name="web",namespace="prod"} 1
virtpod_vm_stats_up{name="stuck",namespace="prod"} 0
virtpod_vm_stats_up{name="dev",namespace="test"} 1
# TYPE virtpod_vm_cpu_seconds_total counter
virtpod_vm_cpu_seconds_total{name="web",namespace="prod"} ` + f(cpu) + `
virtpod_vm_cpu_seconds_total{name="dev",namespace="test"} 1
# TYPE virtpod_vm_memory_bytes gauge
virtpod_vm_memory_bytes{name="web",namespace="prod"} 5.36870912e+08
virtpod_vm_memory_bytes{name="dev",namespace="test"} 1.34217728e+08
# TYPE virtpod_vm_disk_write_bytes_total counter
virtpod_vm_disk_write_bytes_total{drive="root",name="web",namespace="prod"} ` + f(written) + `
virtpod_vm_disk_write_bytes_total{drive="disk-data",name="web",namespace="prod"} ` + f(written) + `
# TYPE virtpod_vm_network_receive_bytes_total counter
virtpod_vm_network_receive_bytes_total{name="web",namespace="prod"} ` + f(rx) + `
# TYPE virtpod_agent_spoofed_frames_dropped_total counter
virtpod_agent_spoofed_frames_dropped_total{counter="mac",namespace="prod",pod="web-runner"} 3
`
}

// TestTopRates: the rates are the counters' growth over the time between two scrapes, disks
// summed; a VM whose runner did not answer either time is left out; the namespace and name
// filter; a counter that fell (a new hypervisor) counts from zero.
func TestTopRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	first, err := parseAgentMetrics(strings.NewReader(agentScrape(10, 1<<20, 4096)), t0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := parseAgentMetrics(strings.NewReader(agentScrape(11, 3<<20, 8192)), t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rows := topRows(first, second, "", "")
	if len(rows) != 2 || rows[0].name != "web" || rows[1].name != "dev" {
		t.Fatalf("rows %+v, want web (prod) and dev (test), not stuck", rows)
	}
	web := rows[0]
	if web.cores != 0.5 || web.memory != 512<<20 || web.diskWrite != 2<<20 || web.rx != 2048 || web.diskRead != 0 {
		t.Errorf("web: %+v; want 0.5 cores, 512Mi, 2Mi/s written (two disks of 1Mi/s), 2Ki/s received", web)
	}
	if got := topRows(first, second, "prod", ""); len(got) != 1 || got[0].name != "web" {
		t.Errorf("namespace prod: %+v", got)
	}
	if got := topRows(first, second, "", "dev"); len(got) != 1 || got[0].namespace != "test" {
		t.Errorf("VM dev: %+v", got)
	}
	restarted, _ := parseAgentMetrics(strings.NewReader(agentScrape(1, 0, 0)), t0.Add(2*time.Second))
	if got := topRows(first, restarted, "prod", "web"); len(got) != 1 || got[0].cores != 0.5 {
		t.Errorf("after a restart: %+v, want the new counter's growth from 0", got)
	}

	var out bytes.Buffer
	if err := renderTop(&out, rows, true); err != nil {
		t.Fatal(err)
	}
	want := "NAMESPACE   NAME   CPU(cores)   MEMORY   DISK READ/s   DISK WRITE/s   NET RX/s   NET TX/s\n" +
		"prod        web    0.500        512Mi    0             2Mi            2Ki        0\n" +
		"test        dev    0.000        128Mi    0             0              0          0\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestTopNamesAnAgentThatDidNotAnswer: a node agent that cannot be read fails the command,
// naming it and its node, rather than leaving its VMs out unsaid; agents not running are not
// asked.
func TestTopNamesAnAgentThatDidNotAnswer(t *testing.T) {
	agents := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-agent-a"}, Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-agent-b"}, Spec: corev1.PodSpec{NodeName: "node-b"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-agent-c"}, Spec: corev1.PodSpec{NodeName: "node-c"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
	}
	var asked []string
	get := func(_ context.Context, pod string) (io.Reader, error) {
		asked = append(asked, pod)
		if pod == "virtpod-agent-b" {
			return nil, errors.New("connection refused")
		}
		return strings.NewReader(agentScrape(1, 0, 0)), nil
	}
	_, err := scrapeAgents(context.Background(), agents, get)
	if err == nil || !strings.Contains(err.Error(), "node agent virtpod-agent-b (node node-b): connection refused") {
		t.Errorf("err %v, want the agent and node that did not answer", err)
	}
	for _, p := range asked {
		if p == "virtpod-agent-c" {
			t.Error("an agent that is not running was asked")
		}
	}
	if s, err := scrapeAgents(context.Background(), agents[:1], get); err != nil || len(s) != 3 {
		t.Errorf("one agent: %d VMs, %v", len(s), err)
	}
}

func TestBytesIEC(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 512: "512", 1024: "1Ki", 1536: "1.5Ki", 3 << 20: "3Mi", 1 << 30: "1Gi", 1.25 * (1 << 30): "1.2Gi"} {
		if got := bytesIEC(in); got != want {
			t.Errorf("bytesIEC(%v) = %q, want %q", in, got, want)
		}
	}
}
