package migration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// agentCredentials reads the agents' Secret as the agents do.
func agentCredentials(t *testing.T) *Credentials {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: agentNamespace, Name: SecretName}, s); err != nil {
		t.Fatal(err)
	}
	c, err := parse(s.Data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ask opens a stream to addr with cfg (nil: plain TCP), sends line and returns the answer.
func ask(t *testing.T, addr string, cfg *tls.Config, line string) (string, error) {
	t.Helper()
	var c net.Conn
	var err error
	if cfg == nil {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
	} else {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func headerLine(uid, migration string) string {
	b, _ := json.Marshal(header{PodUID: uid, Migration: migration})
	return string(b)
}

func channelLine(uid, migration, channel string) string {
	b, _ := json.Marshal(header{PodUID: uid, Migration: migration, Channel: channel})
	return string(b)
}

// TestReceiverRefuses: the receiver takes a stream only over TLS with the agents' own client
// certificate, and only for a pod of its node that a live migration names as its target —
// pods labelled a target (a VM's labels reach its pod) and annotated with the migration are
// refused, and get no migration-receiver; nothing refused reaches a QEMU.
func TestReceiverRefuses(t *testing.T) {
	ns := namespace(t)
	b := newNode(t, "mig-r")
	vm := podcontroltest.VM(t, env.Client, ns, "web")
	mig := newMigration(t, vm, "web-runner", "web-m1")
	m7 := string(mig.UID)
	target := targetPod(t, vm, mig, b.Name)
	plain := runnerPod(t, ns, "plain-runner", b.Name, nil, nil)
	far := podOf(t, vm, ns, "far-m1", "mig-elsewhere", map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget}, map[string]string{vmv1.AnnotationMigration: m7})
	asTarget := map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget}
	// The VM's own pod, labelled a target by its VM and annotated with the live migration.
	labelled := runnerPod(t, ns, "labelled-runner", b.Name, asTarget, map[string]string{vmv1.AnnotationMigration: m7})
	// vm's pod as the migration's target would be, under a name the migration does not give.
	squatter := podOf(t, vm, ns, "web-m2", b.Name, asTarget, map[string]string{vmv1.AnnotationMigration: m7})
	// No VM at all.
	stray := podOf(t, nil, ns, "stray-m1", b.Name, asTarget, map[string]string{vmv1.AnnotationMigration: m7})
	q := listenTarget(t, b.Dir(target, "control1"))
	nbd := listenTargetOn(t, b.Dir(target, "control1"), controlapi.NBDInSocket)
	listenTarget(t, b.Dir(plain, "control2"))
	refusedQEMUs := []*targetQEMU{listenTarget(t, b.Dir(labelled, "control4")), listenTarget(t, b.Dir(squatter, "control5")), listenTarget(t, b.Dir(stray, "control6"))}
	b.start(t)
	addr := annotation(t, target, vmv1.AnnotationMigrationReceiver, 20*time.Second, nonEmpty)

	good := agentCredentials(t).ClientConfig()
	noCert := good.Clone()
	noCert.Certificates = nil
	otherData, err := generate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := parse(otherData)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := good.Clone() // trusts the receiver, but shows another CA's leaf
	otherCA.Certificates = other.ClientConfig().Certificates
	tls12 := good.Clone()
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12

	for _, c := range []struct {
		name string
		cfg  *tls.Config
		line string
		want string // in the answer, or in the error when the answer is none
	}{
		{"plain TCP", nil, headerLine(string(target.UID), m7), "EOF"},
		{"no client certificate", noCert, headerLine(string(target.UID), m7), "certificate"},
		{"another CA's certificate", otherCA, headerLine(string(target.UID), m7), "certificate"},
		{"TLS 1.2", tls12, headerLine(string(target.UID), m7), "protocol version"},
		{"not a header", good, "hello", "is not {"},
		{"a pod that is not a target", good, headerLine(string(plain.UID), m7), "not the target of migration"},
		{"a target on another node", good, headerLine(string(far.UID), m7), "no runner pod with UID"},
		{"another migration", good, headerLine(string(target.UID), "mig-8"), "not the target of migration mig-8"},
		{"a VM's own pod labelled a target", good, headerLine(string(labelled.UID), m7), "is not a migration target"},
		{"the VM's pod under a name the migration does not give", good, headerLine(string(squatter.UID), m7), "is not a migration target"},
		{"a labelled target no VM controls", good, headerLine(string(stray.UID), m7), "is not a migration target"},
		{"a disk's mirror for a pod that is not a target", good, channelLine(string(plain.UID), m7, ChannelNBD), "not the target of migration"},
		{"a disk's mirror for a labelled target no VM controls", good, channelLine(string(stray.UID), m7, ChannelNBD), "is not a migration target"},
		{"an unknown channel", good, channelLine(string(target.UID), m7, "ssh"), `unknown channel "ssh"`},
	} {
		answer, err := ask(t, addr, c.cfg, c.line)
		got := answer
		if err != nil {
			got += err.Error()
		}
		if strings.HasPrefix(answer, answerOK) || !strings.Contains(got, c.want) {
			t.Errorf("%s: answered %q (%v), want a refusal with %q", c.name, answer, err, c.want)
		}
	}
	if n := q.connections() + nbd.connections(); n != 0 {
		t.Fatalf("refused streams reached the target QEMU %d times", n)
	}
	for i, rq := range refusedQEMUs {
		if n := rq.connections(); n != 0 {
			t.Errorf("refused pod %d's QEMU got %d connections", i, n)
		}
	}
	for _, p := range []*corev1.Pod{labelled, squatter, stray} {
		cur := podcontroltest.Current(t, env.Client, p)
		if v := cur.Annotations[vmv1.AnnotationMigrationReceiver]; v != "" {
			t.Errorf("%s: the agent announced itself as receiver (%s) on a pod no migration names", p.Name, v)
		}
	}
	// The same line with the agents' certificate is taken; a second stream at once is not.
	answer, err := ask(t, addr, good, headerLine(string(target.UID), m7))
	if err != nil || answer != answerOK+"\n" {
		t.Fatalf("the agents' own stream: %q, %v", answer, err)
	}
	kubeapi.Eventually(t, "the stream at the target QEMU", 5*time.Second, func() error {
		if n := q.connections(); n != 1 {
			return fmt.Errorf("the target QEMU got %d connections, want 1", n)
		}
		return nil
	})
	if answer, err := ask(t, addr, good, headerLine(string(target.UID), m7)); !strings.Contains(answer, "already took a stream") {
		t.Errorf("a second stream for the same target: %q, %v", answer, err)
	}
	// Each mirrored disk's NBD connection goes to the target's NBD server, not its migration
	// socket, as many as it has disks.
	for i := range 3 {
		if answer, err := ask(t, addr, good, channelLine(string(target.UID), m7, ChannelNBD)); err != nil || answer != answerOK+"\n" {
			t.Fatalf("disk mirror %d: %q, %v", i, answer, err)
		}
	}
	kubeapi.Eventually(t, "the disks' mirrors at the target's NBD server", 5*time.Second, func() error {
		if n, m := nbd.connections(), q.connections(); n != 3 || m != 1 {
			return fmt.Errorf("the NBD server got %d connections (want 3), the migration socket %d (want 1)", n, m)
		}
		return nil
	})
}

// TestEnsureSecret: agents starting together agree on one Secret; a broken one is named with
// the way out.
func TestEnsureSecret(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	creds := make([]*Credentials, 4)
	errs := make([]error, 4)
	for i := range creds {
		wg.Go(func() { creds[i], errs[i] = EnsureSecret(ctx, cs, ns) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, c := range creds[1:] {
		if !c.leaf.Leaf.Equal(creds[0].leaf.Leaf) {
			t.Fatal("agents starting at once got different certificates")
		}
	}
	if _, err := cs.CoreV1().Secrets(ns).Patch(ctx, SecretName, "application/merge-patch+json", []byte(`{"data":{"ca.crt":"eA=="}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureSecret(ctx, cs, ns); err == nil || !strings.Contains(err.Error(), "Secret "+ns+"/"+SecretName) || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("a broken Secret: %v", err)
	}
}

// floodConns is the flood: idle TCP connections to the receiver, none authenticating.
const floodConns = 10000

// TestReceiverBoundsHandshakes: floodConns connections that never start TLS hold at most
// maxHandshakes handshakes (and goroutines) in the receiver, each for acceptTimeout at most,
// and little memory; the agents' own stream still gets through while they are all open.
func TestReceiverBoundsHandshakes(t *testing.T) {
	ns := namespace(t)
	b := newNode(t, "mig-flood")
	vm := podcontroltest.VM(t, env.Client, ns, "web")
	mig := newMigration(t, vm, "web-runner", "web-m1")
	target := targetPod(t, vm, mig, b.Name)
	q := listenTarget(t, b.Dir(target, "control1"))
	e, _ := b.start(t)
	addr := annotation(t, target, vmv1.AnnotationMigrationReceiver, 20*time.Second, nonEmpty)

	before := runtime.NumGoroutine()
	var mem0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem0)
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	start := time.Now()
	var peak atomic.Int32
	sampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := e.handshakes.Load(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-sampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for range floodConns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("after %d connections: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	kubeapi.Eventually(t, "every slot taken", 2*time.Second, func() error {
		if n := e.handshakes.Load(); n != maxHandshakes {
			return fmt.Errorf("%d handshakes in flight", n)
		}
		return nil
	})
	close(sampling)
	<-sampled
	if peak := peak.Load(); peak > maxHandshakes {
		t.Fatalf("%d handshakes in flight, want at most %d", peak, maxHandshakes)
	}
	if n := runtime.NumGoroutine() - before; n > 2*maxHandshakes+50 {
		t.Fatalf("%d more goroutines with %d idle connections open", n, floodConns)
	}
	// The agent's limit is 128Mi; the test process holds the flood's client ends too, so this
	// bounds the receiver's share from above.
	var mem1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem1)
	grew := int64(mem1.HeapInuse) - int64(mem0.HeapInuse)
	if grew > 64<<20 {
		t.Fatalf("the heap grew by %d MiB with %d idle connections open", grew>>20, floodConns)
	}
	t.Logf("%d idle connections in %v: at most %d handshakes, %d goroutines and %d KiB of heap more", floodConns, time.Since(start), peak.Load(), runtime.NumGoroutine()-before, grew>>10)

	// The agents' stream, retried as the sender does, gets through while the idle ones are
	// still open on this side; the idle ones in a slot are cut at acceptTimeout.
	good := agentCredentials(t).ClientConfig()
	var answer string
	kubeapi.Eventually(t, "the agents' stream through the flood", acceptTimeout+10*time.Second, func() error {
		var err error
		if answer, err = ask(t, addr, good, headerLine(string(target.UID), string(mig.UID))); err != nil {
			return err
		}
		return nil
	})
	if answer != answerOK+"\n" {
		t.Fatalf("the agents' stream: %q", answer)
	}
	kubeapi.Eventually(t, "the stream at the target QEMU", 5*time.Second, func() error {
		if n := q.connections(); n != 1 {
			return fmt.Errorf("the target QEMU got %d connections", n)
		}
		return nil
	})
	if took := time.Since(start); took > acceptTimeout+10*time.Second {
		t.Errorf("the stream took %v to get through", took)
	}
	kubeapi.Eventually(t, "idle connections cut at acceptTimeout", acceptTimeout+2*time.Second, func() error {
		if n := e.handshakes.Load(); n != 0 {
			return fmt.Errorf("%d handshakes in flight", n)
		}
		return nil
	})
}
