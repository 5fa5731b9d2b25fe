package nodemanager

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/krberror"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
)

// The agent authenticates to NodeManagers whose web endpoints demand
// Kerberos (hadoop.http.authentication.type=kerberos) with SPNEGO, as
// Hadoop's own clients do: a ticket-granting ticket got with the agent's
// keytab (an AS exchange, as UserGroupInformation.loginUserFromKeytab),
// and a service ticket for the NodeManager's principal (HTTP/<host>) put
// in an "Authorization: Negotiate" header when the NodeManager answers 401
// with "WWW-Authenticate: Negotiate". Tickets are got again before they
// expire, at 80% of their lifetime (UserGroupInformation's renewal
// window), with the keytab: a failed renewal keeps the ticket while it is
// valid, and is said once.

// renewAt is the share of a ticket's lifetime after which it is renewed
// (UserGroupInformation's TICKET_RENEW_WINDOW).
const renewAt = 0.8

// kerberos holds the agent's Kerberos credentials and tickets.
type kerberos struct {
	keytabPath, krb5Path string
	principal            string // resolved: name/host@REALM
	now                  func() time.Time

	mu        sync.Mutex
	cl        *client.Client
	cname     types.PrincipalName
	realm     string
	tgt       *ticket
	svc       map[string]*ticket // by SPN
	logins    uint64
	renewErr  error // the last failed renewal of a ticket still valid
	renewWarn string
	exposed   string // the keytab's mode lets every user read it (said once)
}

type ticket struct {
	tkt        messages.Ticket
	key        types.EncryptionKey
	start, end time.Time
}

// due says whether t is in its renewal window.
func (t *ticket) due(now time.Time) bool {
	return !now.Before(t.start.Add(time.Duration(float64(t.end.Sub(t.start)) * renewAt)))
}

func (t *ticket) valid(now time.Time) bool { return now.Before(t.end) }

// krb5ConfPath is where krb5.conf is read from: the flag, else the first
// file of $KRB5_CONFIG that exists, else /etc/krb5.conf (as MIT's library).
func krb5ConfPath(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv("KRB5_CONFIG"); env != "" {
		for _, p := range filepath.SplitList(env) {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		return filepath.SplitList(env)[0]
	}
	return "/etc/krb5.conf"
}

func newKerberos(keytabPath, principal, krb5Path string, hostname func() string, now func() time.Time) *kerberos {
	if strings.Contains(principal, "_HOST") {
		principal = ResolvePrincipal(principal, hostname())
	}
	return &kerberos{keytabPath: keytabPath, krb5Path: krb5ConfPath(krb5Path), principal: principal, now: now, svc: map[string]*ticket{}}
}

// setup reads krb5.conf and the keytab (again, until they can be used).
func (k *kerberos) setup() error {
	if k.cl != nil {
		return nil
	}
	conf, err := config.Load(k.krb5Path)
	if err != nil {
		return &Error{Cause: CauseKerberos, Kind: ErrKrb5Conf, Err: err,
			Msg: fmt.Sprintf("cannot read krb5.conf %s (--krb5-conf, KRB5_CONFIG)", k.krb5Path)}
	}
	name, realm, _ := strings.Cut(k.principal, "@")
	if realm == "" {
		realm = conf.LibDefaults.DefaultRealm
		if realm == "" {
			return &Error{Cause: CauseKerberos, Kind: ErrPrincipal,
				Msg: fmt.Sprintf("principal %s has no realm and krb5.conf %s names no default_realm: give --nm-principal as name/host@REALM", k.principal, k.krb5Path)}
		}
		k.principal = name + "@" + realm
	}
	if st, err := os.Stat(k.keytabPath); err == nil && st.Mode().Perm()&0o004 != 0 {
		k.exposed = fmt.Sprintf("keytab %s is readable by every user of this node (mode %04o): it holds the agent's keys; make it readable by the agent alone (chmod 0400, or systemd's LoadCredential)", k.keytabPath, st.Mode().Perm())
	}
	kt, err := keytab.Load(k.keytabPath)
	if err != nil {
		return &Error{Cause: CauseKerberos, Kind: ErrKeytab, Err: err,
			Msg: fmt.Sprintf("cannot read the keytab %s (--nm-keytab; it must be readable by the agent's user)", k.keytabPath)}
	}
	cname := types.NewPrincipalName(nametype.KRB_NT_PRINCIPAL, name)
	if has, holds := keytabHolds(kt, cname, realm); !has {
		return &Error{Cause: CauseKerberos, Kind: ErrKeytab,
			Msg: fmt.Sprintf("keytab %s (--nm-keytab) holds no key of %s (--nm-principal); it holds keys of: %s", k.keytabPath, k.principal, holds)}
	}
	k.cl = client.NewWithKeytab(name, realm, kt, conf, client.DisablePAFXFAST(true))
	k.cname, k.realm = cname, realm
	return nil
}

// keytabHolds says whether kt has a key of name@realm, and lists whose
// keys it has.
func keytabHolds(kt *keytab.Keytab, name types.PrincipalName, realm string) (bool, string) {
	seen := map[string]bool{}
	for _, e := range kt.Entries {
		p := strings.Join(e.Principal.Components, "/") + "@" + e.Principal.Realm
		if e.Principal.Realm == realm && strings.Join(e.Principal.Components, "/") == name.PrincipalNameString() {
			return true, ""
		}
		seen[p] = true
	}
	if len(seen) == 0 {
		return false, "none (an empty keytab)"
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return false, strings.Join(names, ", ")
}

// header is the "Negotiate ..." Authorization header for a request to the
// service spn (HTTP/host or HTTP/host@REALM), getting or renewing tickets
// as needed.
func (k *kerberos) header(spn string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.setup(); err != nil {
		return "", err
	}
	now := k.now()
	if err := k.ensureTGT(now); err != nil {
		return "", err
	}
	t, err := k.serviceTicket(spn, now)
	if err != nil {
		return "", err
	}
	init, err := spnego.NewNegTokenInitKRB5(k.cl, t.tkt, t.key)
	if err != nil {
		return "", &Error{Cause: CauseKerberos, Kind: ErrKerberos, Err: err, Msg: "cannot make a SPNEGO token"}
	}
	tok := spnego.SPNEGOToken{Init: true, NegTokenInit: init}
	b, err := tok.Marshal()
	if err != nil {
		return "", &Error{Cause: CauseKerberos, Kind: ErrKerberos, Err: err, Msg: "cannot make a SPNEGO token"}
	}
	return "Negotiate " + base64.StdEncoding.EncodeToString(b), nil
}

// ensureTGT logs in with the keytab when there is no ticket-granting
// ticket, or when it is due for renewal; a failed renewal keeps the old
// one while it is valid.
func (k *kerberos) ensureTGT(now time.Time) error {
	if k.tgt != nil && !k.tgt.due(now) {
		return nil
	}
	err := k.login(now)
	if err == nil {
		return nil
	}
	if k.tgt != nil && k.tgt.valid(now) {
		k.renewErr = err
		return nil
	}
	if k.tgt != nil {
		return &Error{Cause: CauseKerberos, Kind: ErrTicketExpired, Err: err,
			Msg: fmt.Sprintf("the Kerberos ticket of %s expired at %s and could not be renewed", k.principal, k.tgt.end.UTC().Format(time.RFC3339))}
	}
	return err
}

// login gets a ticket-granting ticket with the keytab (an AS exchange).
func (k *kerberos) login(now time.Time) error {
	req, err := messages.NewASReqForTGT(k.realm, k.cl.Config, k.cname)
	if err != nil {
		return &Error{Cause: CauseKerberos, Kind: ErrKerberos, Err: err, Msg: "cannot make a Kerberos AS request for " + k.principal}
	}
	rep, err := k.cl.ASExchange(k.realm, req, 0)
	if err != nil {
		return k.kdcError(err, "")
	}
	d := rep.DecryptedEncPart
	start := d.StartTime
	if start.IsZero() {
		start = d.AuthTime
	}
	k.tgt = &ticket{tkt: rep.Ticket, key: d.Key, start: start, end: d.EndTime}
	k.logins++
	k.renewErr = nil
	return nil
}

// serviceTicket is a ticket for spn, got again in its renewal window.
func (k *kerberos) serviceTicket(spn string, now time.Time) (*ticket, error) {
	t := k.svc[spn]
	if t != nil && !t.due(now) {
		return t, nil
	}
	pn, realm := types.ParseSPNString(spn)
	if realm == "" {
		if realm = k.cl.Config.ResolveRealm(pn.NameString[len(pn.NameString)-1]); realm == "" {
			realm = k.realm
		}
	}
	_, rep, err := k.cl.TGSREQGenerateAndExchange(pn, realm, k.tgt.tkt, k.tgt.key, false)
	if err != nil {
		err = k.kdcError(err, spn)
		if t != nil && t.valid(now) {
			k.renewErr = err
			return t, nil
		}
		return nil, err
	}
	d := rep.DecryptedEncPart
	start := d.StartTime
	if start.IsZero() {
		start = d.AuthTime
	}
	t = &ticket{tkt: rep.Ticket, key: d.Key, start: start, end: d.EndTime}
	k.svc[spn] = t
	return t, nil
}

// kdcCode is the Kerberos error code in a gokrb5 error ("KRB Error: (N) ...").
func kdcCode(err error) (int32, bool) {
	s := err.Error()
	i := strings.Index(s, "KRB Error: (")
	if i < 0 {
		return 0, false
	}
	s = s[i+len("KRB Error: ("):]
	j := strings.IndexByte(s, ')')
	if j < 0 {
		return 0, false
	}
	n, err2 := strconv.ParseInt(s[:j], 10, 32)
	return int32(n), err2 == nil
}

// kdcError turns a failed exchange with the KDC into its clear message:
// for the agent's own principal (spn == "") or a service's ticket.
func (k *kerberos) kdcError(err error, spn string) error {
	e := &Error{Cause: CauseKerberos, Kind: ErrKerberos, Err: err}
	var ke krberror.Krberror
	code, hasCode := kdcCode(err)
	switch {
	case hasCode && code == errorcode.KDC_ERR_C_PRINCIPAL_UNKNOWN:
		e.Kind, e.Msg = ErrPrincipal, fmt.Sprintf("the KDC of realm %s does not know principal %s (--nm-principal): create it, or name the principal the keytab holds", k.realm, k.principal)
	case hasCode && code == errorcode.KDC_ERR_S_PRINCIPAL_UNKNOWN && spn != "":
		e.Kind, e.Msg = ErrServicePrincipal, fmt.Sprintf("the KDC does not know the NodeManager's principal %s: the agent names the NodeManager by its canonical host name; "+
			"set yarn.nodemanager.webapp.spnego-principal (HTTP/_HOST@REALM) or give --nm-url with the host name of the NodeManager's SPNEGO principal", spn)
	case hasCode && (code == errorcode.KDC_ERR_PREAUTH_FAILED || code == errorcode.KRB_AP_ERR_BAD_INTEGRITY):
		e.Kind, e.Msg = ErrStaleKeytab, fmt.Sprintf("the KDC refused the key of %s in keytab %s (--nm-keytab): the principal's keys changed since the keytab was written; "+
			"export them again (kadmin: ktadd -norandkey -k FILE %s) and replace the keytab", k.principal, k.keytabPath, k.principal)
	case hasCode && code == errorcode.KDC_ERR_NAME_EXP:
		e.Kind, e.Msg = ErrPrincipalExpired, fmt.Sprintf("principal %s has expired in the KDC of realm %s: extend it (kadmin: modprinc -expire) or use another", k.principal, k.realm)
	case hasCode && code == errorcode.KDC_ERR_KEY_EXPIRED:
		e.Kind, e.Msg = ErrPrincipalExpired, fmt.Sprintf("the key (password) of %s has expired in the KDC: re-key it and export a new keytab (kadmin: cpw -randkey, then ktadd)", k.principal)
	case hasCode && code == errorcode.KDC_ERR_CLIENT_REVOKED:
		e.Kind, e.Msg = ErrPrincipalExpired, fmt.Sprintf("principal %s is disabled or locked out in the KDC", k.principal)
	case hasCode && code == errorcode.KRB_AP_ERR_SKEW:
		e.Kind, e.Msg = ErrClockSkew, "this node's clock differs from the KDC's by more than Kerberos allows (5 minutes by default): synchronise the clocks (NTP)"
	case hasCode && code == errorcode.KDC_ERR_ETYPE_NOSUPP:
		e.Kind, e.Msg = ErrKerberos, fmt.Sprintf("the KDC and keytab %s share no encryption type for %s: export keys of a type the KDC supports", k.keytabPath, k.principal)
	case errors.As(err, &ke) && ke.RootCause == krberror.NetworkingError:
		e.Kind, e.Msg = ErrKDCUnreachable, fmt.Sprintf("cannot reach a KDC of realm %s (kdc in krb5.conf %s)", k.realm, k.krb5Path)
	case spn != "":
		e.Msg = fmt.Sprintf("cannot get a Kerberos ticket for %s as %s", spn, k.principal)
	default:
		e.Msg = fmt.Sprintf("cannot log in to Kerberos as %s with keytab %s", k.principal, k.keytabPath)
	}
	return e
}

// KerberosStatus is what the agent's Kerberos credentials are now.
type KerberosStatus struct {
	Principal  string    `json:"principal"`
	Keytab     string    `json:"keytab"`
	ValidUntil time.Time `json:"valid_until,omitzero"` // the ticket-granting ticket's end; zero before a login
	Logins     uint64    `json:"logins"`
	// RenewError is the last renewal that failed while the ticket was
	// still valid ("" when none).
	RenewError string `json:"renew_error,omitempty"`
}

func (k *kerberos) status() KerberosStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := KerberosStatus{Principal: k.principal, Keytab: k.keytabPath, Logins: k.logins}
	if k.tgt != nil {
		s.ValidUntil = k.tgt.end
	}
	if k.renewErr != nil {
		s.RenewError = k.renewErr.Error()
	}
	return s
}

// takeExposed returns the warning of a keytab every user may read, once.
func (k *kerberos) takeExposed() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.exposed
	k.exposed = ""
	return s
}

// takeRenewWarning returns the failed renewal's message once per failure
// ("" otherwise): the client logs it.
func (k *kerberos) takeRenewWarning() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.renewErr == nil {
		k.renewWarn = ""
		return ""
	}
	msg := k.renewErr.Error()
	if msg == k.renewWarn || k.tgt == nil {
		return ""
	}
	k.renewWarn = msg
	return msg + fmt.Sprintf(" (the ticket stays valid until %s)", k.tgt.end.UTC().Format(time.RFC3339))
}

// close forgets the tickets.
func (k *kerberos) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		k.cl.Destroy()
	}
	k.tgt, k.svc = nil, map[string]*ticket{}
}
