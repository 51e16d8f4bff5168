// Package elfdeps finds the shared libraries a dynamically linked ELF program needs, the way the
// dynamic loader would, by reading DT_NEEDED, DT_RPATH and DT_RUNPATH with debug/elf. It does
// not run the program or ldd, so it works for binaries of a package that cannot run here.
package elfdeps

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
)

// SystemDirs are the loader's trusted directories on Debian amd64, in its search order
// (multiarch first; /etc/ld.so.conf adds nothing else a Debian package installs into).
var SystemDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// Result is everything a set of programs needs at run time.
type Result struct {
	// Interpreters are the dynamic loaders named by PT_INTERP, e.g. /lib64/ld-linux-x86-64.so.2.
	Interpreters []string
	// Libraries are the paths the loader would open, as found in the search directories (not
	// with symlinks resolved: the image needs the same names).
	Libraries []string
}

// Resolver resolves dependencies against a set of directories.
type Resolver struct {
	Dirs []string
	// Root, when set, is another system's root tree on this machine (Debian 13's, built by
	// mmdebstrap): files, directories and results are that system's paths, read under Root.
	Root string
}

// Resolve walks the dependencies of files (executables or shared objects) recursively. A static
// program has no interpreter and no libraries; that is not an error.
func (r Resolver) Resolve(files ...string) (Result, error) {
	dirs := r.Dirs
	if dirs == nil {
		dirs = SystemDirs
	}
	var res Result
	seen := map[string]bool{}
	queue := slices.Clone(files)
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		if seen[file] {
			continue
		}
		seen[file] = true
		info, err := read(r.under(file))
		if err != nil {
			return Result{}, err
		}
		if info.interp != "" && !slices.Contains(res.Interpreters, info.interp) {
			res.Interpreters = append(res.Interpreters, info.interp)
		}
		for _, lib := range info.needed {
			found, err := find(lib, file, info, dirs, r.under)
			if err != nil {
				return Result{}, err
			}
			if !slices.Contains(res.Libraries, found) {
				res.Libraries = append(res.Libraries, found)
			}
			queue = append(queue, found)
		}
	}
	slices.Sort(res.Interpreters)
	slices.Sort(res.Libraries)
	return res, nil
}

type elfInfo struct {
	interp, rpath, runpath string
	needed                 []string
	class                  elf.Class
	machine                elf.Machine
}

// under is where path p of the resolved system is on this machine.
func (r Resolver) under(p string) string {
	if r.Root == "" {
		return p
	}
	return path.Join(r.Root, p)
}

func read(file string) (elfInfo, error) {
	f, err := elf.Open(file)
	if err != nil {
		return elfInfo{}, fmt.Errorf("%s: %w", file, err)
	}
	defer f.Close()
	info := elfInfo{class: f.Class, machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return elfInfo{}, fmt.Errorf("%s: PT_INTERP: %w", file, err)
			}
			info.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Section(".dynamic") == nil {
		return info, nil // static
	}
	if info.needed, err = f.ImportedLibraries(); err != nil {
		return elfInfo{}, fmt.Errorf("%s: DT_NEEDED: %w", file, err)
	}
	info.rpath = dynString(f, elf.DT_RPATH)
	info.runpath = dynString(f, elf.DT_RUNPATH)
	return info, nil
}

func dynString(f *elf.File, tag elf.DynTag) string {
	s, err := f.DynString(tag)
	if err != nil || len(s) == 0 {
		return ""
	}
	return strings.Join(s, ":")
}

// find searches like the loader: DT_RPATH (ignored when DT_RUNPATH is set), DT_RUNPATH, then the
// system directories. A candidate of another ELF class or machine is skipped, as the loader does.
func find(lib, from string, info elfInfo, dirs []string, under func(string) string) (string, error) {
	if strings.Contains(lib, "/") {
		return lib, nil
	}
	var search []string
	if info.runpath == "" {
		search = append(search, expand(info.rpath, from)...)
	}
	search = append(search, expand(info.runpath, from)...)
	search = append(search, dirs...)
	for _, dir := range search {
		cand := path.Join(dir, lib)
		f, err := elf.Open(under(cand))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			continue // not ELF (a linker script, say): the loader skips it too
		}
		ok := f.Class == info.class && f.Machine == info.machine
		f.Close()
		if ok {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s needs %s, which is in none of %s: install the Debian package that ships it", from, lib, strings.Join(search, ", "))
}

// expand splits a colon list and replaces $ORIGIN with the needing file's directory.
func expand(list, from string) []string {
	var out []string
	for _, d := range strings.Split(list, ":") {
		if d == "" {
			continue
		}
		d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", path.Dir(from)), "$ORIGIN", path.Dir(from))
		out = append(out, d)
	}
	return out
}
