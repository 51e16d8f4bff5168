package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
)

// The cluster's registry is a host process like etcd, not a pod: containerd pulls the sandbox
// image from it before any pod can run, so it must not depend on a pod. It listens on the
// node's address, where containerd (on the host) and pods alike reach it, over plain HTTP, which
// containerd is told explicitly (hosts.toml).
const registryPort = 5000

// registry is the registry's HOST:PORT, as image references name it.
func (c *cluster) registry() string {
	if c.primary != nil {
		return c.primary.registry() // one registry, on the first node
	}
	return c.nodeIP + ":" + strconv.Itoa(registryPort)
}

// sandboxImage is the pause image, pulled from the cluster's registry.
func (c *cluster) sandboxImage() string { return c.registry() + "/virtpod/pause:3.10" }

func (c *cluster) registryComponent() (component, error) {
	body := fmt.Sprintf(`version: 0.1
log: {level: info, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
`, c.path("registry"), c.registry())
	conf := c.path("config", "registry.yaml")
	if err := writeFile(conf, body, 0o644); err != nil {
		return component{}, err
	}
	return component{name: "registry", bin: c.binFor("registry"), args: []string{"serve", conf},
		env:   []string{"OTEL_TRACES_EXPORTER=none"},
		ready: httpReady(http.DefaultClient, "http://"+c.registry()+"/v2/")}, nil
}

// registryHosts writes containerd's per-registry settings (config_path): the cluster's registry
// over plain HTTP, and "localhost" — the name the image archives carry (localhost/virtpod/...),
// which tests and the dev loop use — served by the same registry, so every pull goes through it.
func (c *cluster) registryHosts() (string, error) {
	dir := c.path("config", "containerd-hosts")
	body := fmt.Sprintf(`server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, c.registry())
	for _, host := range []string{c.registry(), "localhost"} {
		if err := writeFile(filepath.Join(dir, host, "hosts.toml"), body, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// pushImages pushes every image archive in the images folder to the cluster's registry, under
// its archive tag's path, and returns where each went. With --import it also imports them into
// containerd, the fallback from before the registry.
func (c *cluster) pushImages(ctx context.Context) (push.Lock, error) {
	tars, err := push.Dir(c.imagesDir)
	if err != nil {
		return nil, err
	}
	if len(tars) == 0 {
		return nil, fmt.Errorf("no image archives in %s: run `make images` (IMAGES_DIR=%s)", c.imagesDir, c.imagesDir)
	}
	begin := time.Now()
	pushed, err := push.Archives(push.Options{Registry: c.registry(), Insecure: true}, tars...)
	if err != nil {
		return nil, err
	}
	for _, p := range pushed {
		fmt.Printf("  pushed %s -> %s\n", p.Source, p.Digest)
	}
	fmt.Printf("  %d images pushed to %s in %.1fs\n", len(pushed), c.registry(), time.Since(begin).Seconds())
	lock, err := push.NewLock(pushed)
	if err != nil {
		return nil, err
	}
	if err := push.WriteLock(c.path("registry-images.json"), lock); err != nil {
		return nil, err
	}
	if c.importToo {
		for _, t := range tars {
			out, err := exec.CommandContext(ctx, filepath.Join(c.ctrdBin, "ctr"), "-a", c.socket(), "-n", "k8s.io",
				"images", "import", "--all-platforms", "--no-unpack", t).CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("importing %s: %v\n%s", t, err, out)
			}
			fmt.Printf("  imported %s\n", filepath.Base(t))
		}
	}
	return lock, nil
}
