package main

// The Dockerfiles build what imagebuild builds. Docker is not available here, so they are read
// with buildkit's own Dockerfile parser and shell lexer and compared with imagebuild's layouts:
// the same Go programs from the same packages, built the same way, at the same paths; the same
// entrypoint, user and Debian packages; and every directory the build needs copied in.

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// dockerfiles are the Dockerfiles and the layouts they must build.
var dockerfiles = map[string]imageLayout{
	"Dockerfile.runner":     runnerLayout,
	"Dockerfile.controller": controllerLayout,
}

// goBuild is one `go build` in a Dockerfile.
type goBuild struct {
	env, flags []string
	out, pkg   string
}

// dockerImage is what a Dockerfile builds, as far as it can differ from an imageLayout.
type dockerImage struct {
	builds     []goBuild
	sources    []string          // what the build stage COPYs from the context
	copies     map[string]string // final-stage COPY --from: destination → source
	entrypoint []string
	user       string
	debian     []string // apt-get install's packages in the final stage
}

// readDockerfile parses a Dockerfile of two stages: Go builds, then the image.
func readDockerfile(t *testing.T, name string) dockerImage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	lex := shell.NewLex(res.EscapeToken)
	img := dockerImage{copies: map[string]string{}}
	stages := 0
	for _, n := range res.AST.Children {
		var args []string
		for a := n.Next; a != nil; a = a.Next {
			args = append(args, a.Value)
		}
		final := stages == 2
		switch strings.ToLower(n.Value) {
		case "from":
			stages++
		case "copy":
			src, dest := args[:len(args)-1], args[len(args)-1]
			switch {
			case final && slices.Contains(n.Flags, "--from=build") && len(src) == 1:
				img.copies[dest] = src[0]
			case final:
				t.Errorf("%s:%d: the image may COPY only single binaries from the build stage: %s", name, n.StartLine, n.Original)
			default:
				img.sources = append(img.sources, src...)
			}
		case "run":
			if n.Attributes["json"] {
				t.Errorf("%s:%d: RUN in exec form is not read by this test: %s", name, n.StartLine, n.Original)
				continue
			}
			words, err := lex.ProcessWords(args[0], shell.EnvsFromSlice(nil))
			if err != nil {
				t.Fatalf("%s:%d: %v", name, n.StartLine, err)
			}
			for _, cmd := range splitCommands(words) {
				readCommand(t, name, n.StartLine, final, cmd, &img)
			}
		case "entrypoint":
			if !n.Attributes["json"] {
				t.Errorf("%s:%d: ENTRYPOINT must be in exec form, as imagebuild's entrypoint is", name, n.StartLine)
			}
			img.entrypoint = args
		case "user":
			img.user = args[0]
		}
	}
	if stages != 2 {
		t.Fatalf("%s has %d stages, want 2 (build, then the image)", name, stages)
	}
	return img
}

// splitCommands cuts a RUN's words at &&.
func splitCommands(words []string) [][]string {
	var cmds [][]string
	start := 0
	for i, w := range append(words, "&&") {
		if w == "&&" {
			if i > start {
				cmds = append(cmds, words[start:i])
			}
			start = i + 1
		}
	}
	return cmds
}

// readCommand notes a go build (build stage) or an apt-get install (final stage).
func readCommand(t *testing.T, name string, line int, final bool, cmd []string, img *dockerImage) {
	var env []string
	for len(cmd) > 0 && strings.Contains(cmd[0], "=") && !strings.HasPrefix(cmd[0], "-") {
		env, cmd = append(env, cmd[0]), cmd[1:]
	}
	switch {
	case !final && len(cmd) >= 2 && cmd[0] == "go" && cmd[1] == "build":
		b := goBuild{env: env}
		for i := 2; i < len(cmd); i++ {
			switch {
			case cmd[i] == "-o" && i+1 < len(cmd):
				b.out = cmd[i+1]
				i++
			case strings.HasPrefix(cmd[i], "-"):
				b.flags = append(b.flags, cmd[i])
			case b.pkg == "":
				b.pkg = cmd[i]
			default:
				t.Errorf("%s:%d: go build of more than one package", name, line)
			}
		}
		img.builds = append(img.builds, b)
	case final && len(cmd) >= 2 && cmd[0] == "apt-get" && cmd[1] == "install":
		for _, w := range cmd[2:] {
			if !strings.HasPrefix(w, "-") {
				img.debian = append(img.debian, w)
			}
		}
	}
}

// compare lists every way the Dockerfile's image differs from l.
func compare(l imageLayout, img dockerImage) []string {
	var diffs []string
	built := map[string]bool{}
	for _, p := range l.programs {
		rel := "./" + strings.TrimPrefix(p.pkg, module+"/")
		i := slices.IndexFunc(img.builds, func(b goBuild) bool { return b.pkg == rel })
		if i < 0 {
			diffs = append(diffs, fmt.Sprintf("no `go build ... %s` for %s, which imagebuild puts at %s", rel, path.Base(p.dest), p.dest))
			continue
		}
		b := img.builds[i]
		built[b.out] = true
		if !slices.Equal(b.env, goBuildEnv) || !slices.Equal(b.flags, goBuildFlags) {
			diffs = append(diffs, fmt.Sprintf("%s is built with %q %q, imagebuild builds with %q %q", rel, b.env, b.flags, goBuildEnv, goBuildFlags))
		}
		if src, ok := img.copies[p.dest]; !ok || src != b.out {
			diffs = append(diffs, fmt.Sprintf("%s: want COPY --from=build %s %s (the build of %s), have %q", p.dest, b.out, p.dest, rel, src))
		}
	}
	for _, b := range img.builds {
		if !built[b.out] {
			diffs = append(diffs, fmt.Sprintf("go build of %s is no program of imagebuild's %s image", b.pkg, l.name))
		}
	}
	for dest, src := range img.copies {
		if !slices.ContainsFunc(l.programs, func(p goProgram) bool { return p.dest == dest }) {
			diffs = append(diffs, fmt.Sprintf("COPY --from=build %s %s: imagebuild's %s image has nothing at %s", src, dest, l.name, dest))
		}
	}
	if !slices.Equal(img.entrypoint, []string{l.entrypoint}) {
		diffs = append(diffs, fmt.Sprintf("ENTRYPOINT %q, imagebuild's is [%q]", img.entrypoint, l.entrypoint))
	}
	if img.user != l.user {
		diffs = append(diffs, fmt.Sprintf("USER %q, imagebuild's is %q", img.user, l.user))
	}
	debian := slices.Sorted(slices.Values(img.debian))
	if !slices.Equal(debian, l.debian) {
		diffs = append(diffs, fmt.Sprintf("apt-get install %q, imagebuild takes files from %q", debian, l.debian))
	}
	return diffs
}

func TestDockerfilesBuildWhatImagebuildBuilds(t *testing.T) {
	for name, l := range dockerfiles {
		t.Run(name, func(t *testing.T) {
			img := readDockerfile(t, name)
			for _, d := range compare(l, img) {
				t.Errorf("%s differs from `imagebuild %s`: %s", name, l.name, d)
			}
			checkSources(t, name, l, img.sources)
		})
	}
}

// checkSources: the build stage copies go.mod, go.sum and the top directory of every package of
// this module the programs import (or the whole context).
func checkSources(t *testing.T, name string, l imageLayout, sources []string) {
	if slices.Contains(sources, ".") {
		return
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if !slices.Contains(sources, f) {
			t.Errorf("%s does not COPY %s", name, f)
		}
	}
	args := []string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}
	for _, p := range l.programs {
		args = append(args, p.pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), goBuildEnv...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if !ok {
			continue
		}
		top, _, _ := strings.Cut(rel, "/")
		if !slices.Contains(sources, top+"/") && !slices.Contains(sources, top) {
			t.Errorf("%s does not COPY %s/, which %s needs", name, top, pkg)
		}
	}
}

// TestCompareCatchesADifference: a program added to imagebuild's layout and not to its
// Dockerfile, or a changed user, entrypoint or package, is reported.
func TestCompareCatchesADifference(t *testing.T) {
	img := readDockerfile(t, "Dockerfile.runner")
	if d := compare(runnerLayout, img); len(d) != 0 {
		t.Fatalf("Dockerfile.runner differs already: %q", d)
	}
	more := runnerLayout
	more.programs = append(slices.Clone(more.programs), goProgram{"copy program", module + "/cmd/vmcopy", "/usr/local/bin/vmcopy", "--vmcopy-binary"})
	if d := compare(more, img); len(d) != 1 || !strings.Contains(d[0], "./cmd/vmcopy") {
		t.Errorf("a program imagebuild has and the Dockerfile lacks: %q", d)
	}
	other := runnerLayout
	other.user, other.entrypoint, other.debian = "65532:65532", "/bin/sh", append(slices.Clone(other.debian), "qemu-efi-aarch64")
	if d := compare(other, img); len(d) != 3 {
		t.Errorf("user, entrypoint and packages changed: %q", d)
	}
	img.builds[0].flags = nil
	if d := compare(runnerLayout, img); len(d) != 1 || !strings.Contains(d[0], "built with") {
		t.Errorf("go build without imagebuild's flags: %q", d)
	}
}
