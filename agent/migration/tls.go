package migration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The agents' shared identity on the stream: one CA and one leaf certificate for every agent,
// in a Secret of the agents' namespace. Only agents can read it (the agent's Role names it), so
// holding that leaf is what being an agent means to the other end.
const (
	SecretName = "virtpod-migration-tls"
	// ServerName is the leaf's only name; both ends verify it.
	ServerName = "virtpod-agent"
	// certValidity: no rotation machinery; to rotate, delete the Secret and restart the agents
	// (docs/security.md).
	certValidity = 10 * 365 * 24 * time.Hour
)

// Keys of the Secret.
const (
	keyCA   = "ca.crt"
	keyCert = corev1.TLSCertKey
	keyKey  = corev1.TLSPrivateKeyKey
)

// Credentials are the agents' CA and leaf, ready for both ends of a stream. The CA's key is
// thrown away once it signed the leaf: the CA vouches for that one certificate and no other.
type Credentials struct {
	pool *x509.CertPool
	leaf tls.Certificate
}

// EnsureSecret reads the agents' Secret, making it first when no agent has yet. Two agents
// starting at once both try to create it; the API server keeps one and the other reads it.
func EnsureSecret(ctx context.Context, c kubernetes.Interface, namespace string) (*Credentials, error) {
	secrets := c.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var data map[string][]byte
		if data, err = generate(time.Now()); err != nil {
			return nil, err
		}
		s, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: SecretName,
			Labels: map[string]string{"app.kubernetes.io/name": "virtpod-agent"}}, Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, SecretName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the migration stream's Secret %s/%s: %w", namespace, SecretName, err)
	}
	cred, err := parse(s.Data)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w (delete it: the agents make a new one when they restart)", namespace, SecretName, err)
	}
	return cred, nil
}

// generate makes a CA and a leaf for ServerName, usable by servers and clients.
func generate(now time.Time) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial := func() *big.Int { n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); return n }
	notBefore := now.Add(-time.Hour) // nodes' clocks differ a little
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "virtpod migration CA"},
		NotBefore: notBefore, NotAfter: now.Add(certValidity), IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: ServerName}, DNSNames: []string{ServerName},
		NotBefore: notBefore, NotAfter: now.Add(certValidity), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		keyCA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		keyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		keyKey:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func parse(data map[string][]byte) (*Credentials, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[keyCA]) {
		return nil, fmt.Errorf("%s holds no PEM certificate", keyCA)
	}
	leaf, err := tls.X509KeyPair(data[keyCert], data[keyKey])
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", keyCert, keyKey, err)
	}
	return &Credentials{pool: pool, leaf: leaf}, nil
}

// ServerConfig is the receiver's: TLS 1.3 only, a client certificate from the agents' CA (the
// leaf) required.
func (c *Credentials) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c.leaf},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: c.pool}
}

// ClientConfig is the sender's: TLS 1.3 only, the receiver must show the agents' leaf.
func (c *Credentials) ClientConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c.leaf},
		RootCAs: c.pool, ServerName: ServerName}
}
