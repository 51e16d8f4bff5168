package podnet

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// relayDialTimeout bounds connecting to the guest; a guest still booting refuses or ignores.
const relayDialTimeout = 10 * time.Second

// portRelay makes the guest's ports reachable on the pod's loopback, which is where the API
// server's port-forward (kubectl port-forward, vmctl port-forward) connects: for each TCP port
// the VM declares it listens on 127.0.0.1:<port> and joins each client to <pod IP>:<port>, the
// guest, from the runner's own address towards it (guestnet.RelayIP in pod mode, the bridge's
// 10.0.2.1 in masquerade mode). In pod mode the pod IP itself stays the guest's alone.
type portRelay struct {
	guest     net.IP
	src       *net.TCPAddr // with the bridge as zone for the IPv6 link-local relay address
	log       *zap.Logger
	listeners []net.Listener
	wg        sync.WaitGroup
}

// startRelay listens for every TCP port in ports. A port it cannot listen on is logged and
// skipped: the guest still serves it at the pod IP.
func startRelay(ports []runnerconfig.Port, guest net.IP, src *net.TCPAddr, log *zap.Logger) *portRelay {
	r := &portRelay{guest: guest, src: src, log: log}
	for _, p := range ports {
		if p.Protocol != "TCP" {
			continue // the API server's port-forward carries TCP only
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p.Port)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			log.Warn("port relay: cannot listen; the port is still served at the pod IP", zap.String("port", p.String()), zap.Error(err))
			continue
		}
		r.listeners = append(r.listeners, l)
		r.wg.Add(1)
		go r.accept(l, int(p.Port))
	}
	if len(r.listeners) > 0 {
		log.Info("port relay", zap.Int("ports", len(r.listeners)), zap.Stringer("from", src), zap.Stringer("guest", guest))
	}
	return r
}

func (r *portRelay) accept(l net.Listener, port int) {
	defer r.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go r.join(c.(*net.TCPConn), port)
	}
}

func (r *portRelay) join(client *net.TCPConn, port int) {
	defer client.Close()
	d := net.Dialer{Timeout: relayDialTimeout, LocalAddr: r.src}
	up, err := d.Dial("tcp", net.JoinHostPort(r.guest.String(), strconv.Itoa(port)))
	if err != nil {
		r.log.Info("port relay: guest port not reachable", zap.Int("port", port), zap.Error(err))
		return
	}
	guest := up.(*net.TCPConn)
	defer guest.Close()
	// Each direction ends with a half-close, so a client that finishes sending (an HTTP/1.0
	// request, `nc -N`) still gets the whole answer.
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src *net.TCPConn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			_ = dst.Close()
			_ = src.Close()
			return
		}
		_ = dst.CloseWrite()
	}
	go pipe(guest, client)
	go pipe(client, guest)
	wg.Wait()
}

// Close stops listening; connections already joined run to their end.
func (r *portRelay) Close() {
	for _, l := range r.listeners {
		_ = l.Close()
	}
	r.wg.Wait()
}
