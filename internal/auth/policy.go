package auth

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Policy is an access file: who are operators, which queues' and users'
// jobs are granted to whom, and which users are in which groups (beside
// the groups that the SSO proxy or an API token names):
//
//	# <rule> <what> <who...>; who is a user name or @group
//	operator alice @hadoop-ops     (admin is the same word)
//	queue    etl   @etl-team carol every job of queue etl
//	user     svc-etl @etl-team     every job that svc-etl owns
//	group    etl-team dave erin    dave and erin are in etl-team
//	neighbours operators           what else ran beside a job: operators'
//
// A user sees the jobs they own, and those the rules grant to them or to
// one of their groups; operators see everything (every job, the hosts, lost
// and orphaned processes, the server's own metrics).
type Policy struct {
	operators []string            // users and @groups
	queues    map[string][]string // queue -> users and @groups
	users     map[string][]string // job owner -> users and @groups
	groups    map[string][]string // group -> its users
	// neighboursOperators: the findings that look at what else ran on a
	// job's hosts say it to operators alone ("neighbours operators").
	neighboursOperators bool
}

// LoadPolicy reads an access file.
func LoadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read access file: %w", err)
	}
	defer f.Close()
	p, err := ParsePolicy(f)
	if err != nil {
		return nil, fmt.Errorf("access file %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy reads an access file from r.
func ParsePolicy(r io.Reader) (*Policy, error) {
	p := &Policy{queues: map[string][]string{}, users: map[string][]string{}, groups: map[string][]string{}}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		w := strings.Fields(text)
		if len(w) == 0 {
			continue
		}
		switch w[0] {
		case "operator", "admin":
			if len(w) < 2 {
				return nil, fmt.Errorf("line %d: %s names no user or @group", line, w[0])
			}
			p.operators = append(p.operators, w[1:]...)
		case "neighbours", "neighbors":
			if len(w) != 2 || w[1] != "operators" && w[1] != "everyone" {
				return nil, fmt.Errorf("line %d: %s: want %s operators (or everyone, the default)", line, strings.Join(w, " "), w[0])
			}
			p.neighboursOperators = w[1] == "operators"
		case "queue", "user", "group":
			if len(w) < 3 {
				return nil, fmt.Errorf("line %d: %s %s: want %s NAME and the users or @groups it grants to", line, w[0], strings.Join(w[1:], " "), w[0])
			}
			m := map[string]map[string][]string{"queue": p.queues, "user": p.users, "group": p.groups}[w[0]]
			m[w[1]] = append(m[w[1]], w[2:]...)
		default:
			return nil, fmt.Errorf("line %d: unknown rule %q (operator, admin, queue, user, group, neighbours)", line, w[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for g, members := range p.groups {
		for _, m := range members {
			if strings.HasPrefix(m, "@") {
				return nil, fmt.Errorf("group %s: a group's members are users, not %s", g, m)
			}
		}
	}
	return p, nil
}

// Identity is who makes a request, and what they may see.
type Identity struct {
	User   string
	Groups []string
	// Via is how they were identified: "sso", "token", or "open" (read
	// authentication is off: everyone sees everything).
	Via string
	// Operator sees every job, the hosts, lost processes and the
	// server's metrics.
	Operator bool
	// Queues and Users are the queues and job owners whose jobs they
	// see, beside their own.
	Queues, Users []string
	// HideNeighbours: the findings they read say nothing of what else
	// ran on a job's hosts (the access file's "neighbours operators",
	// for those who are not operators).
	HideNeighbours bool
}

// Open is everyone when reads need no login.
var Open = &Identity{User: "", Via: "open", Operator: true}

// Identify returns what user, in groups, may see under p (nil p: only
// their own jobs).
func (p *Policy) Identify(user string, groups []string, via string) *Identity {
	id := &Identity{User: user, Via: via, Users: []string{user}}
	for _, g := range groups {
		if g = strings.TrimPrefix(strings.TrimSpace(g), "@"); g != "" && !slices.Contains(id.Groups, g) {
			id.Groups = append(id.Groups, g)
		}
	}
	if p == nil {
		return id
	}
	for g, members := range p.groups {
		if slices.Contains(members, user) && !slices.Contains(id.Groups, g) {
			id.Groups = append(id.Groups, g)
		}
	}
	slices.Sort(id.Groups)
	id.Operator = id.in(p.operators)
	id.HideNeighbours = p.neighboursOperators && !id.Operator
	for _, q := range sortedKeys(p.queues) {
		if id.in(p.queues[q]) {
			id.Queues = append(id.Queues, q)
		}
	}
	for _, u := range sortedKeys(p.users) {
		if u != user && id.in(p.users[u]) {
			id.Users = append(id.Users, u)
		}
	}
	return id
}

// in reports whether the identity is one of who (users and @groups).
func (id *Identity) in(who []string) bool {
	for _, w := range who {
		if g, ok := strings.CutPrefix(w, "@"); ok {
			if slices.Contains(id.Groups, g) {
				return true
			}
		} else if w == id.User {
			return true
		}
	}
	return false
}

// Sees reports whether the identity may see a job of user in queue.
func (id *Identity) Sees(user, queue string) bool {
	return id.Operator || slices.Contains(id.Users, user) || slices.Contains(id.Queues, queue)
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
