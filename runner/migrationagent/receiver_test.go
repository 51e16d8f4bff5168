package migrationagent

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
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

// TestReceiverRefuses: the receiver takes a stream only over TLS with the agents' own client
// certificate, and only for a pod of its node that is the named migration's target; nothing
// refused reaches the target QEMU.
func TestReceiverRefuses(t *testing.T) {
	ns := namespace(t)
	b := newNode(t, "mig-r")
	target := targetPod(t, ns, "web-m1", b.name, "mig-7")
	plain := runnerPod(t, ns, "plain-runner", b.name, nil, nil)
	far := targetPod(t, ns, "far-m1", "mig-elsewhere", "mig-7")
	q := listenTarget(t, b.dir(target, "control1"))
	listenTarget(t, b.dir(plain, "control2"))
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
		{"plain TCP", nil, headerLine(string(target.UID), "mig-7"), "EOF"},
		{"no client certificate", noCert, headerLine(string(target.UID), "mig-7"), "certificate"},
		{"another CA's certificate", otherCA, headerLine(string(target.UID), "mig-7"), "certificate"},
		{"TLS 1.2", tls12, headerLine(string(target.UID), "mig-7"), "protocol version"},
		{"not a header", good, "hello", "is not {"},
		{"a pod that is not a target", good, headerLine(string(plain.UID), "mig-7"), "is not a migration target"},
		{"a target on another node", good, headerLine(string(far.UID), "mig-7"), "no runner pod with UID"},
		{"another migration", good, headerLine(string(target.UID), "mig-8"), "not the target of migration mig-8"},
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
	if n := q.connections(); n != 0 {
		t.Fatalf("refused streams reached the target QEMU %d times", n)
	}
	// The same line with the agents' certificate is taken; a second stream at once is not.
	answer, err := ask(t, addr, good, headerLine(string(target.UID), "mig-7"))
	if err != nil || answer != answerOK+"\n" {
		t.Fatalf("the agents' own stream: %q, %v", answer, err)
	}
	kubeapi.Eventually(t, "the stream at the target QEMU", 5*time.Second, func() error {
		if n := q.connections(); n != 1 {
			return fmt.Errorf("the target QEMU got %d connections, want 1", n)
		}
		return nil
	})
	if answer, err := ask(t, addr, good, headerLine(string(target.UID), "mig-7")); !strings.Contains(answer, "already took a stream") {
		t.Errorf("a second stream for the same target: %q, %v", answer, err)
	}
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
