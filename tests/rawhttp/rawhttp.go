// Package rawhttp sends one HTTP/1.0 GET over a connection dialled by the calling goroutine.
// net/http dials from goroutines of its own, which matters to a test whose thread sits in
// another network namespace; and a guest's busybox httpd speaks HTTP/1.0 anyway.
package rawhttp

import (
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Get sends GET / to addr (host:port) and returns the body of a 200 answer.
func Get(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	head, body, _ := strings.Cut(string(b), "\r\n\r\n")
	if status, _, _ := strings.Cut(head, "\r\n"); !strings.Contains(status, " 200 ") {
		return "", fmt.Errorf("%s answered %q", addr, head)
	}
	return body, nil
}
