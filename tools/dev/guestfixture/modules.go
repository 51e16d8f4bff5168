package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// moduleIndex finds kernel modules by name in an unpacked /lib/modules/<version> tree. Debian's
// package ships no modules.dep (depmod makes it at install time), so dependencies are read from
// each module's own .modinfo section instead.
type moduleIndex struct {
	paths map[string]string // module name -> path of its .ko
}

func newModuleIndex(dir string) (*moduleIndex, error) {
	idx := &moduleIndex{paths: map[string]string{}}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		switch {
		case strings.HasSuffix(name, ".ko"):
			idx.paths[canonical(strings.TrimSuffix(name, ".ko"))] = p
		case strings.Contains(name, ".ko."):
			// Compressed modules would need a decompressor the fixture does not carry.
			idx.paths[canonical(name[:strings.Index(name, ".ko.")])] = p
		}
		return nil
	})
	return idx, err
}

// canonical folds '-' into '_' as the kernel does for module names.
func canonical(name string) string { return strings.ReplaceAll(name, "-", "_") }

// order returns the wanted modules and everything they depend on, dependencies first.
func (idx *moduleIndex) order(wanted []string) ([]string, error) {
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string) error
	visit = func(name string) error {
		name = canonical(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		p, ok := idx.paths[name]
		if !ok {
			return fmt.Errorf("kernel module %s not found in the kernel package (built in, or renamed?)", name)
		}
		if !strings.HasSuffix(p, ".ko") {
			return fmt.Errorf("kernel module %s is compressed (%s): not supported", name, filepath.Base(p))
		}
		state[name] = 1
		deps, err := moduleDepends(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		state[name] = 2
		out = append(out, name)
		return nil
	}
	for _, w := range wanted {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("module %s has no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
