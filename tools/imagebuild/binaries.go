package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/tools/imagebuild/elfdeps"
)

// How goBinary builds: static linux/amd64 binaries without paths or symbols. The Dockerfiles
// build with the same environment and flags (dockerfile_test.go).
var (
	goBuildEnv   = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}
	goBuildFlags = []string{"-trimpath", "-ldflags=-s -w"}
)

// goBinary returns prebuilt (given with flag) when set, else builds pkg as a static
// linux/amd64 binary into dir.
func goBinary(flag, prebuilt, pkg, dir string) (string, error) {
	if prebuilt != "" {
		res, err := elfdeps.Resolver{}.Resolve(prebuilt)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flag, err)
		}
		if len(res.Interpreters) > 0 {
			return "", fmt.Errorf("%s: %s is dynamically linked, and the image has no libc for it: build it with CGO_ENABLED=0", flag, prebuilt)
		}
		return prebuilt, nil
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", slices.Concat([]string{"build"}, goBuildFlags, []string{"-o", out, pkg})...)
	cmd.Env = append(os.Environ(), goBuildEnv...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: run imagebuild inside the virtpod repository, or pass %s=FILE", cmd, err, flag)
	}
	return out, nil
}

// Users every image with a base layer knows; 65532 is distroless's "nonroot", which the
// controller runs as.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"virtpod-runner:x:107:107:virtpod runner:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	group = "root:x:0:\nvirtpod-runner:x:107:\nnonroot:x:65532:\nnobody:x:65534:\n"
)

// baseLayer is the same in every image that has one, so containerd stores it once.
func baseLayer() (*ociimage.Layer, error) {
	l := ociimage.NewLayer("base")
	for _, err := range []error{
		l.File("/etc/passwd", 0o644, []byte(passwd)),
		l.File("/etc/group", 0o644, []byte(group)),
		l.Dir("/tmp", 0o777|os.ModeSticky),
	} {
		if err != nil {
			return nil, err
		}
	}
	return l, nil
}

// binaryLayer holds one binary at dest.
func binaryLayer(name, dest, src string) (*ociimage.Layer, error) {
	l := ociimage.NewLayer(name)
	if err := l.HostFile(dest, src, 0o755); err != nil {
		return nil, err
	}
	return l, nil
}
