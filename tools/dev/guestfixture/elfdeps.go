package main

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// libDirs are where this Debian host keeps the shared libraries a program links.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64"}

// copyProgram copies the dynamically linked program at path into root at the same path, with
// its ELF interpreter and every shared library it needs (DT_NEEDED, followed through the
// libraries), each at its host path: the busybox guest has no package manager, and the host's
// Debian packages are the guest's.
func copyProgram(path, root string) error {
	todo, seen := []string{path}, map[string]bool{}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		f, err := elf.Open(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		needed, err := f.ImportedLibraries()
		interp := interpreter(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if interp != "" {
			todo = append(todo, interp)
		}
		for _, lib := range needed {
			found := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s, which is in none of %v", p, lib, libDirs)
			}
			todo = append(todo, found)
		}
	}
	for p := range seen {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyFile(real, dst, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// interpreter is the program's PT_INTERP (the dynamic loader), or "".
func interpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil && len(b) > 0 {
				return string(b[:len(b)-1]) // NUL-terminated
			}
		}
	}
	return ""
}
