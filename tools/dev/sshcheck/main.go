// Command sshcheck logs in to an SSH server with a private key and runs one command, printing its
// output: the end-to-end tests' SSH client, run from a pod (the toolbox image carries it) so a
// guest's sshd is checked from the pod network as another workload would reach it. It trusts
// any host key: it checks that the guest lets the key's owner in, not who the guest is.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

func main() {
	key := flag.String("key", "", "private key file (OpenSSH or PEM)")
	user := flag.String("user", "", "user to log in as")
	timeout := flag.Duration("timeout", 20*time.Second, "longest wait to connect and log in")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: sshcheck -key FILE -user USER HOST:PORT COMMAND")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 || *key == "" || *user == "" {
		flag.Usage()
		os.Exit(2)
	}
	out, err := run(*key, *user, flag.Arg(0), flag.Arg(1), *timeout)
	os.Stdout.Write(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sshcheck:", err)
		var ee *ssh.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitStatus())
		}
		os.Exit(1)
	}
}

func run(keyFile, user, addr, command string, timeout time.Duration) ([]byte, error) {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	cfg := &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // see the package comment
		Timeout:         timeout,
	}
	conn, err := dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("log in to %s as %s: %w", addr, user, err)
	}
	client := ssh.NewClient(c, chans, reqs)
	defer client.Close()
	_ = conn.SetDeadline(time.Time{})
	s, err := client.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.CombinedOutput(command)
}

// dial connects to addr, asking again each second while the guest refuses (its sshd may start
// after its VM reads Running), for up to timeout; it says on stderr how long it waited.
func dial(addr string, timeout time.Duration) (net.Conn, error) {
	start := time.Now()
	for {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			if waited := time.Since(start); waited > time.Second {
				fmt.Fprintf(os.Stderr, "sshcheck: %s answered after %v\n", addr, waited.Round(time.Second))
			}
			return conn, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start)+time.Second > timeout {
			return nil, fmt.Errorf("connect to %s (waited %v): %w", addr, time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
}
