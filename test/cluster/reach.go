package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// UnderlayRouterCIDR is the lab router's address on the node underlay of the real-kubelet lab
// (testdata/nodes gives the nodes 10.89.0.11-13). It is not the manifests labs' 192.0.2.0/24: the
// root netns routes this prefix into the lab (the API server dials the kubelets), and on these
// machines 192.0.2.0/24 is the host's own eth0 network, where a dial to a lab address would
// leave the machine by its real interface.
const UnderlayRouterCIDR = "10.89.0.1/24"

// routeIntoLab checks the host's routes and then routes the node underlay and the cluster's pod
// CIDR from the root netns over the link to the lab router, so the API server reaches the
// kubelets (exec, logs, attach, port-forward) and pods (pods/proxy, services/proxy). The routes
// go with the link in Close.
func (c *Cluster) routeIntoLab() error {
	under, err := netip.ParsePrefix(c.Lab.RouterPrefix().Masked().String())
	if err != nil {
		return err
	}
	pods, err := netip.ParsePrefix(c.cfg.ClusterCIDR)
	if err != nil {
		return fmt.Errorf("ClusterCIDR: %w", err)
	}
	out, err := c.run("ip", "-j", "route", "show", "table", "all")
	if err != nil {
		return err
	}
	if err := lab.CheckRoutesFree([]byte(out), []netip.Prefix{under, pods.Masked()}); err != nil {
		return err
	}
	for _, p := range []netip.Prefix{under, pods.Masked()} {
		if _, err := c.run("ip", "route", "add", p.String(), "via", c.linkIP.Next().String(), "dev", c.link); err != nil {
			return err
		}
	}
	return nil
}

// routePodCIDR routes the node's pod CIDR in the lab router to the node (dual-stack: its IPv6 pod
// CIDR to its IPv6 address too).
func (kn *KNode) routePodCIDR() error {
	_, err := kn.c.run("ip", "-n", kn.c.Lab.RouterNetns, "route", "replace", kn.PodCIDR.String(), "via", kn.IP.String())
	if err != nil || !kn.PodCIDR6.IsValid() {
		return err
	}
	_, err = kn.c.run("ip", "-n", kn.c.Lab.RouterNetns, "-6", "route", "replace", kn.PodCIDR6.String(), "via", kn.IP6.String())
	return err
}

// servingCert writes the kubelet's serving certificate (SAN: its name and InternalIP) signed by
// the control plane's CA into dir (kubelet.crt, kubelet.key), as kubeadm's kubelet gets one, so
// the API server (--kubelet-certificate-authority) verifies the kubelet it dials.
func (kn *KNode) servingCert(dir string) (certFile, keyFile string, err error) {
	pki := filepath.Join(kn.c.CP.Dir, "pki")
	caCert, caKey, err := loadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "system:node:" + kn.Name, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{kn.Name},
		IPAddresses:  []net.IP{net.IP(kn.IP.AsSlice())},
	}
	if kn.IP6.IsValid() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(kn.IP6.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func loadCA(certFile, keyFile string) (*x509.Certificate, any, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	blk, _ := pem.Decode(cb)
	if blk == nil {
		return nil, nil, fmt.Errorf("%s: no PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	blk, _ = pem.Decode(kb)
	if blk == nil {
		return nil, nil, fmt.Errorf("%s: no PEM block", keyFile)
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		return cert, k, nil
	}
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	return cert, k, nil
}
