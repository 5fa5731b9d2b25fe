package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/taskscope/taskscope/internal/minica"
	"github.com/taskscope/taskscope/internal/minikdc"
	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/simulator"
)

// demoSecurity is what `taskscope demo --secure` starts: a KDC on
// loopback, a CA, and the agents' principal (taskscope/<this node>) with
// its keytab. The simulated NodeManagers are secured with them
// (simulator.Security); the agents find their HTTPS address and
// ssl-client.xml's truststore in their conf dirs, and log in with the
// keytab.
type demoSecurity struct {
	kdc    *minikdc.KDC
	ca     *minica.CA
	host   string
	keytab string
}

func startDemoSecurity(ctx context.Context, dir string) (*demoSecurity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kdc, err := minikdc.Start(ctx, minikdc.Options{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("--secure: %w", err)
	}
	s := &demoSecurity{kdc: kdc, host: nodemanager.CanonicalHostname(), keytab: filepath.Join(dir, "taskscope.keytab")}
	if s.ca, err = minica.New("taskscope demo CA"); err == nil {
		if err = kdc.AddPrincipal(ctx, "", "taskscope/"+s.host); err == nil {
			err = kdc.Keytab(ctx, s.keytab, "taskscope/"+s.host)
		}
	}
	if err != nil {
		kdc.Stop()
		return nil, fmt.Errorf("--secure: %w", err)
	}
	return s, nil
}

// simulator is the cluster's security (nil when not secured).
func (s *demoSecurity) simulator() *simulator.Security {
	if s == nil {
		return nil
	}
	return &simulator.Security{KDC: s.kdc, CA: s.ca, Host: s.host, Admins: []string{"taskscope"}}
}

// agent is how the agents reach the NodeManagers.
func (s *demoSecurity) agent() nodemanager.ClientConfig {
	if s == nil {
		return nodemanager.ClientConfig{}
	}
	return nodemanager.ClientConfig{Keytab: s.keytab, Principal: "taskscope/_HOST", Krb5Conf: s.kdc.Krb5Conf}
}
