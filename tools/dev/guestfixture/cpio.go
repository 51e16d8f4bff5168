package main

import (
	"fmt"
	"io"
	"strings"
)

// cpioWriter writes the "newc" cpio format that the Linux kernel unpacks as an initramfs
// (Documentation/driver-api/early-userspace/buffer-format.rst). Writing it here keeps the
// fixture free of a cpio binary and lets it add device nodes without being root.
type cpioWriter struct {
	w     io.Writer
	off   int64
	inode uint32
	err   error
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
	modeChar = 0o020000
)

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, name and body. rdevMajor/rdevMinor matter only for device nodes.
func (c *cpioWriter) entry(name string, mode uint32, body []byte, rdevMajor, rdevMinor uint32) {
	name = strings.TrimPrefix(name, "/")
	c.inode++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.inode, mode, 0, 0, nlink, 0, len(body), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(body)
	c.pad()
}

func (c *cpioWriter) Dir(name string)                         { c.entry(name, modeDir|0o755, nil, 0, 0) }
func (c *cpioWriter) File(name string, perm uint32, b []byte) { c.entry(name, modeFile|perm, b, 0, 0) }
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, modeLink|0o777, []byte(target), 0, 0)
}
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, modeChar|perm, nil, major, minor)
}

// Close writes the trailer the kernel looks for.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	return c.err
}
