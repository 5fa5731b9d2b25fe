package agent

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/VictoriaMetrics/metrics"

	"github.com/taskscope/taskscope/internal/nodemanager"
)

// nmFlags are the flags of run and snapshot that say how to reach the
// node's NodeManager: where (--nm-url, else its conf dir says), HTTPS
// roots and Kerberos (docs/operations.md, "Secure clusters").
type nmFlags struct {
	url, keytab, principal, krb5, caFile *string
}

func addNMFlags(fl *flag.FlagSet) nmFlags {
	return nmFlags{
		url: fl.String("nm-url", "", "the NodeManager's web services, http(s)://HOST:PORT (default: where the yarn-site.xml of the NodeManager found on the node says, "+
			"yarn.nodemanager.webapp.address, or yarn.nodemanager.webapp.https.address with yarn.http.policy=HTTPS_ONLY)"),
		keytab: fl.String("nm-keytab", "", "keytab of --nm-principal, for NodeManagers that demand Kerberos (SPNEGO; hadoop.http.authentication.type=kerberos)"),
		principal: fl.String("nm-principal", "", "the agent's Kerberos principal, e.g. taskscope/_HOST@EXAMPLE.COM "+
			"(_HOST: this node's canonical name, as Hadoop resolves it; no realm: krb5.conf's default_realm)"),
		krb5: fl.String("krb5-conf", "", "krb5.conf (default: $KRB5_CONFIG, else /etc/krb5.conf)"),
		caFile: fl.String("nm-ca-file", "", "PEM file of the CA certificates that sign NodeManagers' HTTPS certificates "+
			"(default: the truststore of the NodeManager's ssl-client.xml, else the system's roots; verification is never turned off)"),
	}
}

func (f nmFlags) config() nodemanager.ClientConfig {
	return nodemanager.ClientConfig{Keytab: *f.keytab, Principal: *f.principal, Krb5Conf: *f.krb5, CAFile: *f.caFile}
}

// newNMClient makes the NodeManager client, logging to log unless its
// config names a logger.
func newNMClient(cfg nodemanager.ClientConfig, log *slog.Logger) (*nodemanager.Client, error) {
	if cfg.Log == nil {
		cfg.Log = log
	}
	c, err := nodemanager.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot make the NodeManager client: %w", err)
	}
	if cfg.Keytab != "" {
		log.Info("NodeManagers that demand Kerberos are asked with SPNEGO", "principal", cfg.Principal, "keytab", cfg.Keytab)
	}
	return c, nil
}

const (
	nmFailingName, nmFailingHelp = "taskscope_agent_nodemanager_failing",
		"NodeManagers whose last poll failed, by cause (the agent then goes on with what /proc shows)."
	krbLoginsName, krbLoginsHelp = "taskscope_agent_kerberos_logins_total",
		"Kerberos logins with the agent's keytab (the first, and each renewal of its ticket)."
	krbExpiryName, krbExpiryHelp = "taskscope_agent_kerberos_ticket_expiry_timestamp_seconds",
		"When the agent's Kerberos ticket expires (Unix time; 0 before a login, and without --nm-keytab)."
)

// writeNMMetrics writes the NodeManager client's metrics.
func writeNMMetrics(w io.Writer, c *nodemanager.Client) {
	if c == nil {
		return
	}
	failing := c.Failing()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", nmFailingName, nmFailingHelp, nmFailingName)
	for _, cause := range nodemanager.Causes {
		metrics.WriteGaugeUint64(w, fmt.Sprintf("%s{cause=%q}", nmFailingName, cause), uint64(failing[cause]))
	}
	var logins, exp uint64
	if k := c.Kerberos(); k != nil {
		logins = k.Logins
		if !k.ValidUntil.IsZero() {
			exp = uint64(k.ValidUntil.Unix())
		}
	}
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", krbLoginsName, krbLoginsHelp, krbLoginsName)
	metrics.WriteCounterUint64(w, krbLoginsName, logins)
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", krbExpiryName, krbExpiryHelp, krbExpiryName)
	metrics.WriteGaugeUint64(w, krbExpiryName, exp)
}
