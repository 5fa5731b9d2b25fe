// Package minikdc runs a Kerberos KDC of its own realm on loopback, as
// Hadoop's MiniKdc does for Hadoop's tests: MIT's krb5kdc (Debian's
// krb5-kdc package; kadmin.local is in krb5-admin-server) with a database,
// a krb5.conf and a kdc.conf in a directory of its own. Principals and
// keytabs are made on demand with kadmin.local. Nothing system-wide is
// read or written: every command it runs is pointed at its own files
// (KRB5_CONFIG, KRB5_KDC_PROFILE), and so are the clients given Env or
// Krb5Conf. The tests of the agent's NodeManager client and the secured
// demo (`taskscope demo --secure`) use it.
package minikdc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskscope/taskscope/internal/deathsig"
)

// The programs of MIT Kerberos it runs.
const (
	krb5kdc     = "/usr/sbin/krb5kdc"
	kdb5Util    = "/usr/sbin/kdb5_util"
	kadminLocal = "/usr/sbin/kadmin.local"
)

// ErrNotInstalled is returned by Start (wrapped) when MIT Kerberos's KDC
// programs are missing.
var ErrNotInstalled = errors.New("MIT Kerberos's KDC is not installed (Debian: krb5-kdc and krb5-admin-server; scripts/test-deps.sh installs them)")

// Available says whether the KDC's programs are installed.
func Available() error {
	for _, p := range []string{krb5kdc, kdb5Util, kadminLocal} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNotInstalled, p, err)
		}
	}
	return nil
}

// Options configure a KDC.
type Options struct {
	// Dir holds the database, the configuration and the logs (it must
	// exist; the caller removes it).
	Dir string
	// Realm is the realm's name (default TASKSCOPE.TEST).
	Realm string
	// MaxLife bounds the lifetime of every ticket the KDC issues
	// (default 1 h). Tests of ticket renewal make it a few seconds.
	MaxLife time.Duration
	// MaxRenewableLife bounds renewable tickets (0: none are renewable).
	MaxRenewableLife time.Duration
}

// KDC is a running krb5kdc.
type KDC struct {
	Realm string
	Dir   string
	// Krb5Conf is a krb5.conf naming this KDC for Realm (its default
	// realm); KDCConf is its kdc.conf.
	Krb5Conf, KDCConf string
	// Addr is where it listens, TCP and UDP ("127.0.0.1:port").
	Addr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done <-chan struct{}
}

// Start creates the realm's database in opt.Dir and starts the KDC on a
// free loopback port.
func Start(ctx context.Context, opt Options) (*KDC, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if opt.Realm == "" {
		opt.Realm = "TASKSCOPE.TEST"
	}
	if opt.MaxLife <= 0 {
		opt.MaxLife = time.Hour
	}
	dir, err := filepath.Abs(opt.Dir)
	if err != nil {
		return nil, err
	}
	k := &KDC{Realm: opt.Realm, Dir: dir, Krb5Conf: filepath.Join(dir, "krb5.conf"), KDCConf: filepath.Join(dir, "kdc.conf")}
	// A port free a moment ago may be taken (by TCP or UDP) before the
	// KDC binds it: try a few.
	var errs []error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		k.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := k.writeConf(opt); err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(dir, "principal")); err != nil {
			if out, err := k.run(ctx, kdb5Util, "create", "-s", "-r", k.Realm, "-P", "taskscope-minikdc-master"); err != nil {
				return nil, fmt.Errorf("cannot create the realm's database: %w: %s", err, out)
			}
		}
		err = k.start()
		if err == nil {
			return k, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("cannot start the KDC: %w", errors.Join(errs...))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// writeConf writes krb5.conf and kdc.conf. Clients speak TCP to it
// (udp_preference_limit = 1), as Java's do for large tickets.
func (k *KDC) writeConf(opt Options) error {
	krb5 := fmt.Sprintf(`[libdefaults]
	default_realm = %[1]s
	dns_lookup_realm = false
	dns_lookup_kdc = false
	rdns = false
	udp_preference_limit = 1
	ticket_lifetime = 24h
	forwardable = true

[realms]
	%[1]s = {
		kdc = %[2]s
	}
`, k.Realm, k.Addr)
	renew := "0"
	if opt.MaxRenewableLife > 0 {
		renew = strconv.Itoa(int(opt.MaxRenewableLife.Seconds())) + "s"
	}
	// Principals require pre-authentication, as in production realms
	// (a wrong key is then refused by the KDC, not found out by the
	// client).
	kdc := fmt.Sprintf(`[kdcdefaults]
	kdc_listen = %[2]s
	kdc_tcp_listen = %[2]s

[realms]
	%[1]s = {
		database_name = %[3]s/principal
		key_stash_file = %[3]s/stash
		acl_file = %[3]s/kadm5.acl
		max_life = %[4]ds
		max_renewable_life = %[5]s
		default_principal_flags = +preauth
		supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
	}

[logging]
	kdc = FILE:%[3]s/kdc.log
	admin_server = FILE:%[3]s/kadmin.log
	default = FILE:%[3]s/krb5.log
`, k.Realm, k.Addr, k.Dir, int(opt.MaxLife.Seconds()), renew)
	if err := os.WriteFile(k.Krb5Conf, []byte(krb5), 0o644); err != nil {
		return err
	}
	return os.WriteFile(k.KDCConf, []byte(kdc), 0o644)
}

// Env is the environment that points MIT Kerberos's programs and
// libraries at this KDC's files (KRB5_CONFIG, KRB5_KDC_PROFILE).
func (k *KDC) Env() []string {
	return []string{"KRB5_CONFIG=" + k.Krb5Conf, "KRB5_KDC_PROFILE=" + k.KDCConf}
}

// run runs one of MIT Kerberos's programs on this KDC's files.
func (k *KDC) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), k.Env()...)
	cmd.Dir = k.Dir
	return cmd.CombinedOutput()
}

// start starts krb5kdc and waits until it answers on its port.
func (k *KDC) start() error {
	cmd := exec.Command(krb5kdc, "-n", "-r", k.Realm)
	cmd.Env = append(os.Environ(), k.Env()...)
	cmd.Dir = k.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Ended with this process, should it die without stopping it: from a
	// thread kept until it exits (a plain Pdeathsig ended it whenever the
	// thread that forked it ended, e.g. at an in-process agent's start).
	done, err := deathsig.Start(cmd, syscall.SIGTERM)
	if err != nil {
		return fmt.Errorf("cannot start krb5kdc: %w", err)
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", k.Addr, time.Second); err == nil {
			c.Close()
			k.mu.Lock()
			k.cmd, k.done = cmd, done
			k.mu.Unlock()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("krb5kdc exited (%v): %s", cmd.ProcessState, bytes.TrimSpace(out.Bytes()))
		case <-deadline.C:
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("krb5kdc did not listen on %s within 10s", k.Addr)
		case <-tick.C:
		}
	}
}

// Kadmin runs one kadmin.local query on the realm ("addprinc ...",
// "ktadd ...", "modprinc ...") and returns its output.
func (k *KDC) Kadmin(ctx context.Context, query string) (string, error) {
	out, err := k.run(ctx, kadminLocal, "-r", k.Realm, "-q", query)
	if err != nil {
		return string(out), fmt.Errorf("kadmin.local -q %q: %w: %s", query, err, bytes.TrimSpace(out))
	}
	// kadmin.local exits 0 when a query fails; its errors name themselves.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "error") || strings.Contains(line, "Error") || strings.Contains(line, "while ") {
			return string(out), fmt.Errorf("kadmin.local -q %q: %s", query, strings.TrimSpace(line))
		}
	}
	return string(out), nil
}

// AddPrincipal creates principals with random keys (name or name@REALM),
// with kadmin's addprinc options besides (e.g. "-maxlife 10s").
func (k *KDC) AddPrincipal(ctx context.Context, opts string, names ...string) error {
	for _, n := range names {
		if _, err := k.Kadmin(ctx, strings.TrimSpace("addprinc -randkey "+opts+" "+n)); err != nil {
			return err
		}
	}
	return nil
}

// Keytab writes the principals' current keys into a keytab file (added
// to it if it exists), without changing them (ktadd -norandkey).
func (k *KDC) Keytab(ctx context.Context, file string, principals ...string) error {
	for _, p := range principals {
		if _, err := k.Kadmin(ctx, "ktadd -norandkey -k "+file+" "+p); err != nil {
			return err
		}
	}
	return nil
}

// Rekey gives a principal new random keys (a new key version): keytabs
// written before hold keys the KDC no longer accepts.
func (k *KDC) Rekey(ctx context.Context, principal string) error {
	_, err := k.Kadmin(ctx, "cpw -randkey "+principal)
	return err
}

// Log is what the KDC logged so far (one line per request it answered).
func (k *KDC) Log() string {
	b, _ := os.ReadFile(filepath.Join(k.Dir, "kdc.log"))
	return string(b)
}

// Stop stops the KDC (it can be started again with Restart).
func (k *KDC) Stop() error {
	k.mu.Lock()
	cmd, done := k.cmd, k.done
	k.cmd, k.done = nil, nil
	k.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	return nil
}

// Restart starts a stopped KDC again, on the same port.
func (k *KDC) Restart() error {
	k.mu.Lock()
	running := k.cmd != nil
	k.mu.Unlock()
	if running {
		return nil
	}
	return k.start()
}

// Running says whether krb5kdc is running (started, and not exited).
func (k *KDC) Running() bool {
	k.mu.Lock()
	done := k.done
	k.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}
