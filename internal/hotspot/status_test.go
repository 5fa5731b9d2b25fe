package hotspot

import (
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	s, err := ParseStatus(readFixture(t, "status.txt"), 4243)
	if err != nil {
		t.Fatal(err)
	}
	if s != (Status{EUID: 1002, EGID: 2002, NSPID: 17, CatchesQuit: true}) {
		t.Errorf("got %+v", s)
	}
	// -Xrs: SIGQUIT neither caught nor ignored; an old kernel: no NSpid.
	b := strings.Replace(string(readFixture(t, "status.txt")), "SigCgt:\t2000000181005ccf", "SigCgt:\t2000000181005cc8", 1)
	b = strings.Replace(b, "NSpid:\t4243\t17\n", "", 1)
	s, err = ParseStatus([]byte(b), 4243)
	if err != nil || s.CatchesQuit || s.NSPID != 4243 {
		t.Errorf("-Xrs: %+v, %v", s, err)
	}
	b = strings.Replace(b, "SigIgn:\t0000000000000000", "SigIgn:\t0000000000000004", 1)
	if s, err = ParseStatus([]byte(b), 4243); err != nil || !s.IgnoresQuit {
		t.Errorf("ignored: %+v, %v", s, err)
	}
	for _, drop := range []string{"Uid:", "Gid:", "SigCgt:"} {
		var keep []string
		for _, l := range strings.Split(string(readFixture(t, "status.txt")), "\n") {
			if !strings.HasPrefix(l, drop) {
				keep = append(keep, l)
			}
		}
		if _, err := ParseStatus([]byte(strings.Join(keep, "\n")), 1); err == nil {
			t.Errorf("without %s: no error", drop)
		}
	}
	for _, bad := range []string{"Uid:\tx\n", "Uid:\t1\n", "NSpid:\t-3\n", "SigCgt:\tzz\n"} {
		if _, err := ParseStatus([]byte(bad+"Uid:\t1 1 1 1\nGid:\t1 1 1 1\nSigCgt:\t0\n"), 1); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
