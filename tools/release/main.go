// Command release writes one release of virtpod into a folder: install.yaml (everything
// config/default installs), infrastructure-components.yaml (config/capi, for clusterctl),
// metadata.yaml, the cluster templates, the ClusterClasses and the example alerts
// (prometheusrule.yaml), every image pinned by the digest `imagebuild push --version` recorded in
// the image lock. The folder is also a clusterctl local repository's
// version folder when it is named .../infrastructure-virtpod/VERSION. `make release` runs it
// after pushing the images and building vmctl into the folder (docs/install.md).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
	"github.com/virtpod/virtpod/tools/release/manifests"
)

func main() {
	var version, lockFile, out, root string
	cmd := &cobra.Command{
		Use:           "release",
		Short:         "Write a virtpod release (install.yaml, clusterctl files) with images pinned by digest",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			return write(root, version, lockFile, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "the release's version, vMAJOR.MINOR.PATCH[-PRE] (required)")
	f.StringVar(&lockFile, "lock", "", "image lock written by `imagebuild push --version --lock` (required)")
	f.StringVar(&out, "out", "", "folder to write the release into (required)")
	f.StringVar(&root, "root", ".", "the virtpod repository")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

var semver = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)

func write(root, version, lockFile, out string) error {
	m := semver.FindStringSubmatch(version)
	if m == nil {
		return fmt.Errorf("--version=%q: want vMAJOR.MINOR.PATCH, e.g. v0.1.0 (clusterctl needs semantic versions)", version)
	}
	if lockFile == "" || out == "" {
		return fmt.Errorf("--lock and --out are required")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	lock, err := push.ReadLock(lockFile)
	if err != nil {
		return fmt.Errorf("--lock: %w (imagebuild push --version=%s --lock=FILE writes it)", err, version)
	}
	for _, path := range releaseImages {
		if p, ok := lock[path]; ok && !strings.HasSuffix(p.Tag, ":"+version) {
			return fmt.Errorf("--lock: %s was pushed as %s, not as version %s: push again with --version=%s", path, p.Tag, version, version)
		}
	}
	if err := checkMetadata(filepath.Join(root, "config/clusterctl/metadata.yaml"), m[1], m[2]); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, m := range manifests.Rendered {
		body, err := render(root, m.Dir, version, lock)
		if err != nil {
			return err
		}
		head := fmt.Sprintf("# virtpod %s: %s\n# Rendered from %s with every image pinned by digest (make release).\n", version, m.What, m.Dir)
		if err := os.WriteFile(filepath.Join(out, m.File), append([]byte(head), body...), 0o644); err != nil {
			return err
		}
	}
	copies, err := manifests.CopiedFiles(root)
	if err != nil {
		return err
	}
	for _, src := range copies {
		if err := copyFile(src, filepath.Join(out, filepath.Base(src))); err != nil {
			return err
		}
	}
	if err := sums(out); err != nil {
		return err
	}
	fmt.Printf("virtpod %s written to %s\n", version, out)
	return nil
}

// checkMetadata fails when clusterctl's metadata.yaml has no release series for major.minor:
// clusterctl refuses such a version.
func checkMetadata(file, major, minor string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var md struct {
		ReleaseSeries []struct{ Major, Minor int } `json:"releaseSeries"`
	}
	if err := yaml.Unmarshal(b, &md); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, s := range md.ReleaseSeries {
		if strconv.Itoa(s.Major) == major && strconv.Itoa(s.Minor) == minor {
			return nil
		}
	}
	return fmt.Errorf("%s has no releaseSeries for %s.%s: add one (with its Cluster API contract) before releasing this version", file, major, minor)
}

// sums writes SHA256SUMS for every other file in dir, as sha256sum -c reads it.
func sums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if e.IsDir() || e.Name() == "SHA256SUMS" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		lines = append(lines, hex.EncodeToString(h.Sum(nil))+"  "+e.Name())
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
