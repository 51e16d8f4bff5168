package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/virtpod/virtpod/tests/loopback"
	"github.com/virtpod/virtpod/tests/prereq"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/runner/binaries"
)

// bootTimeout bounds a TCG boot of the guest fixture (seconds when idle; generous for a loaded
// machine).
const bootTimeout = 180 * time.Second

func needQEMU(t *testing.T) {
	t.Helper()
	needTool(t, "QEMU on this machine", "install qemu-system-x86 and qemu-utils (tools/dev/ci/install-deps.sh)",
		fileExists(qemuSystem) && fileExists(qemuImg))
}

// guestFixture returns the guest fixture's directory, or skips.
func guestFixture(t *testing.T) string {
	t.Helper()
	guest := os.Getenv("VIRTPOD_GUEST")
	if guest == "" {
		guest = filepath.Join(prereq.Cache(), "guest")
	}
	needTool(t, "guest fixture in "+guest, "run make guest-fixture", fileExists(filepath.Join(guest, "disk", "root.img")))
	return guest
}

// TestRunnerImage is the default runner image, with Debian 13's QEMU 10.0 and virtiofsd (make
// qemu-next builds its root tree): complete, and it boots a guest. The release's qemu class
// runs it (the controller's --runner-image) and states what it can do, so a VM that needs more
// is refused before a pod: config/providers/qemu.yaml must say what the image's label says.
func TestRunnerImage(t *testing.T) {
	dir := os.Getenv("VIRTPOD_QEMU_NEXT")
	if dir == "" {
		dir = filepath.Join(prereq.Cache(), "qemu-next")
	}
	needTool(t, "Debian 13's QEMU in "+dir, "run make qemu-next", fileExists(filepath.Join(dir, "qemu.json")))
	features := testRunnerImage(t, filepath.Join(dir, "root"), "10.0.")
	classStates(t, "config/providers/qemu.yaml", features)
}

// TestRunnerImageDebian12 is the runner image with this machine's Debian 12 QEMU 7.2 (make
// image-runner-debian12), checked the same way; the qemu class of
// config/providers/qemu-7.2, which makes it the class's runner, states what it can do.
func TestRunnerImageDebian12(t *testing.T) {
	needQEMU(t)
	features := testRunnerImage(t, "", "7.2.")
	classStates(t, "config/providers/qemu-7.2/providerclass.yaml", features)
}

// classStates fails unless the ProviderClass in file (under the repository) states the runner
// features features (the image's label, comma-separated).
func classStates(t *testing.T, file, features string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	var class vmv1.ProviderClass
	if err := yaml.Unmarshal(b, &class); err != nil {
		t.Fatal(err)
	}
	var stated []string
	for _, f := range class.Spec.RunnerFeatures {
		stated = append(stated, string(f))
	}
	if got := strings.Join(stated, ","); got != features {
		t.Errorf("%s states runnerFeatures [%s]; the runner image it runs has [%s]: make them agree", file, got, features)
	}
}

// testRunnerImage builds the runner image with QEMU from qemuRoot ("": this machine) and checks
// it, its QEMU's version starting with version; it returns the image's runner-features label.
func testRunnerImage(t *testing.T, qemuRoot, version string) string {
	args := []string{"runner"}
	if qemuRoot != "" {
		args = append(args, "--qemu-root="+qemuRoot, "--tag=localhost/virtpod/runner:test-debian13")
	}
	img, _ := build(t, args...)
	cfg := config(t, img)
	if !slices.Equal(cfg.Entrypoint, []string{podspec.RunnerBinary}) || cfg.User != "" {
		t.Errorf("entrypoint %q user %q, want [%s] as root", cfg.Entrypoint, cfg.User, podspec.RunnerBinary)
	}
	files := files(t, img)
	for _, p := range runnerLayout.programs { // virtpod-runner and virtpod-agent
		wantFile(t, files, p.dest, tar.TypeReg, 0o755, "")
	}
	wantFile(t, files, qemuSystem, tar.TypeReg, 0o755, "")
	wantFile(t, files, qemuImg, tar.TypeReg, 0o755, "")
	wantFeatures := ""
	if qemuRoot != "" { // Debian 13 has virtiofsd; Debian 12 none
		wantFile(t, files, binaries.Virtiofsd, tar.TypeReg, 0o755, "")
		wantFeatures = string(vmv1.RunnerFeatureVirtioFS)
	}
	features, labelled := cfg.Labels[LabelRunnerFeatures]
	if !labelled || features != wantFeatures {
		t.Errorf("label %s = %q (set: %v), want %q", LabelRunnerFeatures, features, labelled, wantFeatures)
	}
	wantFile(t, files, "/tmp", tar.TypeDir, 0o1777, "")
	wantFile(t, files, busyboxBinary, tar.TypeReg, 0o755, "")
	for _, a := range devLoopApplets { // kubectl cp and Tilt's sync unpack with tar in the runner container
		wantFile(t, files, "/bin/"+a, tar.TypeSymlink, 0, "busybox")
	}
	root := extract(t, img)

	t.Run("firmware and modules", func(t *testing.T) {
		for _, fw := range qemuFirmware {
			if !slices.ContainsFunc(qemuFirmwareDirs, func(d string) bool { return fileExists(within(t, root, filepath.Join(d, fw.name))) }) {
				t.Errorf("firmware %s is in none of %v", fw.name, qemuFirmwareDirs)
			}
		}
		for _, p := range guestFirmware {
			if !fileExists(within(t, root, p)) {
				t.Errorf("guest firmware %s is not in the image", p)
			}
		}
		for _, m := range qemuModules {
			if p := filepath.Join(qemuModuleDir, m); fileExists(filepath.Join("/", qemuRoot, p)) && !fileExists(within(t, root, p)) {
				t.Errorf("module %s is where QEMU came from but not in the image", p)
			}
		}
	})

	t.Run("no dangling symlinks", func(t *testing.T) {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSymlink != 0 && !fileExists(within(t, root, strings.TrimPrefix(p, root))) {
				t.Errorf("symlink %s points at nothing inside the image", strings.TrimPrefix(p, root))
			}
			return err
		})
	})

	// The loader of the image, told to search only the image's directories, must find every
	// library there: a path outside root means the image lacks it.
	t.Run("libraries complete", func(t *testing.T) {
		loader := within(t, root, "/lib64/ld-linux-x86-64.so.2")
		libPath := within(t, root, "/lib/x86_64-linux-gnu") + ":" + within(t, root, "/usr/lib/x86_64-linux-gnu")
		programs := []string{qemuSystem, qemuImg}
		if fileExists(within(t, root, binaries.Virtiofsd)) {
			programs = append(programs, binaries.Virtiofsd)
		}
		for _, m := range qemuModules {
			if fileExists(within(t, root, filepath.Join(qemuModuleDir, m))) {
				programs = append(programs, filepath.Join(qemuModuleDir, m))
			}
		}
		for _, prog := range programs {
			out, err := exec.Command(loader, "--inhibit-cache", "--library-path", libPath, "--list", within(t, root, prog)).CombinedOutput()
			if err != nil {
				t.Errorf("%s --list %s: %v\n%s", loader, prog, err, out)
				continue
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				_, found, ok := strings.Cut(line, "=> ")
				if strings.Contains(line, "not found") || ok && !strings.HasPrefix(found, root+"/") {
					t.Errorf("%s: %q: library not in the image", prog, strings.TrimSpace(line))
				}
			}
		}
		for _, prog := range []string{qemuSystem, qemuImg} {
			out, err := exec.Command(loader, "--inhibit-cache", "--library-path", libPath, within(t, root, prog), "--version").CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("version "+version)) {
				t.Errorf("%s --version through the image's loader: %v\n%s", prog, err, out)
			}
		}
	})

	t.Run("runner boots a guest", func(t *testing.T) {
		guest := guestFixture(t)
		vm, _ := build(t, "vm", "--kernel="+filepath.Join(guest, "boot", "vmlinuz"),
			"--initrd="+filepath.Join(guest, "boot", "initrd.img"), "--disk="+filepath.Join(guest, "disk", "root.img"))
		// The image volumes, where pkg/podspec mounts them.
		extractTo(t, vm, filepath.Join(root, "virtpod", "images", "kernel"))
		extractTo(t, vm, filepath.Join(root, "virtpod", "images", "disk"))
		args := []string{"--name=imagetest", "--accel=tcg", "--cpus=1", "--memory-mib=256",
			"--kernel=/virtpod/images/kernel" + vmimage.KernelPath, "--initrd=/virtpod/images/kernel" + vmimage.InitrdPath,
			"--root-disk=/virtpod/images/disk" + vmimage.DiskPath, "--disk-size-mib=128", "--kernel-args=rw",
			"--grace-period-seconds=20", "--network=none", "--display=vnc", "--http-addr=" + loopback.FreeAddr(t),
			"--state-dir=/var/run/virtpod", "--termination-log=/tmp/termination-log"}
		shares := fileExists(within(t, root, binaries.Virtiofsd))
		if shares { // the image's own virtiofsd serves a share the guest mounts
			if err := os.MkdirAll(filepath.Join(root, "virtpod", "fs", "web"), 0o755); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--filesystem=tag=web,path=/virtpod/fs/web", "--kernel-args=rw virtpod.fs=web:/www/dev")
		}
		cmd := inContainer(t, root, append([]string{podspec.RunnerBinary}, args...)...)
		out := startWatched(t, cmd, "VIRTPOD-GUEST-READY")
		select {
		case <-out.marker:
		case <-out.exited:
			t.Fatalf("runner exited before the guest was ready:\n%s", out.tail())
		case <-time.After(bootTimeout):
			t.Fatalf("no guest marker within %v:\n%s", bootTimeout, out.tail())
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-out.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("runner did not stop after SIGTERM:\n%s", out.tail())
		}
		msg, _ := os.ReadFile(filepath.Join(root, "tmp", "termination-log"))
		if code := cmd.ProcessState.ExitCode(); code != 0 || string(msg) != "stopped on SIGTERM: guest powered off" {
			t.Errorf("exit %d, termination message %q\n%s", code, msg, out.tail())
		}
		if strings.Contains(out.String(), "Could not open option rom") {
			t.Errorf("QEMU misses an option ROM:\n%s", out.tail())
		}
		if shares {
			if b, err := os.ReadFile(filepath.Join(root, "virtpod", "fs", "web", "from-guest")); !strings.Contains(out.String(), "VIRTPOD-GUEST-FS web /www/dev mounted rw") || err != nil || len(b) == 0 { // its hostname: none without a network
				t.Errorf("the guest's share through the image's virtiofsd: wrote %q, %v\n%s", b, err, out.tail())
			}
		}
	})

	// The runner's pod network adds virtio-net-pci, whose option ROM QEMU loads at start. Boot
	// the kernel alone with it until the kernel panics for want of a root (panic=-1 with
	// -no-reboot makes QEMU exit 0).
	t.Run("virtio-net firmware", func(t *testing.T) {
		guest := guestFixture(t)
		if err := os.MkdirAll(filepath.Join(root, "guest"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", filepath.Join(guest, "boot", "vmlinuz"), filepath.Join(root, "guest", "vmlinuz")).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		cmd := inContainer(t, root, qemuSystem, "-machine", "q35", "-accel", "tcg", "-nodefaults", "-no-user-config",
			"-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", "/guest/vmlinuz",
			"-append", "console=ttyS0 panic=-1", "-device", "virtio-net-pci", "-device", "pvpanic")
		out := startWatched(t, cmd, "Kernel panic")
		select {
		case <-out.exited:
		case <-time.After(bootTimeout):
			t.Fatalf("QEMU still running after %v:\n%s", bootTimeout, out.tail())
		}
		if !cmd.ProcessState.Success() || !strings.Contains(out.String(), "Kernel panic") || strings.Contains(out.String(), "option rom") {
			t.Errorf("QEMU with virtio-net-pci: %v\n%s", cmd.ProcessState, out.tail())
		}
	})
	return features
}

func TestRunnerImageWithoutHypervisor(t *testing.T) {
	needQEMU(t)
	img, _ := build(t, "runner", "--without-hypervisor", "--tag=localhost/virtpod/runner-nohypervisor:test")
	files := files(t, img)
	if _, ok := files[qemuSystem]; ok {
		t.Errorf("%s is in the image", qemuSystem)
	}
	for p := range files {
		if strings.HasPrefix(p, qemuModuleDir+"/") || strings.HasSuffix(p, ".rom") || strings.HasSuffix(p, ".bin") {
			t.Errorf("%s is in an image without the hypervisor", p)
		}
	}
	wantFile(t, files, qemuImg, tar.TypeReg, 0o755, "")
	wantFile(t, files, podspec.RunnerBinary, tar.TypeReg, 0o755, "")

	root := extract(t, img)
	cmd := inContainer(t, root, podspec.RunnerBinary, "--name=nohv", "--accel=tcg", "--cpus=1", "--memory-mib=128",
		"--kernel=/virtpod/images/kernel/boot/vmlinuz", "--root-disk=/virtpod/images/disk/disk/root.img",
		"--network=none", "--termination-log=/tmp/termination-log")
	out, _ := cmd.CombinedOutput()
	msg, _ := os.ReadFile(filepath.Join(root, "tmp", "termination-log"))
	want := "provider binary not found: qemu-system-x86_64 (/usr/bin/qemu-system-x86_64)"
	if code := cmd.ProcessState.ExitCode(); code != 2 || string(msg) != want {
		t.Errorf("exit %d, termination message %q; want 2, %q\n%s", code, msg, want, out)
	}
}

// watched collects a process's output and signals when a marker line appears.
type watched struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker chan struct{}
	exited chan struct{}
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *watched) tail() string {
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-25):], "\n")
}

func startWatched(t *testing.T, cmd *exec.Cmd, marker string) *watched {
	t.Helper()
	w := &watched{marker: make(chan struct{}), exited: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	go func() {
		// exited closes once the process is gone and all its output is read.
		defer close(w.exited)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			w.mu.Lock()
			w.buf.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
			if strings.Contains(sc.Text(), marker) {
				once.Do(func() { close(w.marker) })
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
	}()
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			_ = cmd.Process.Kill()
			<-w.exited
		}
	})
	return w
}
