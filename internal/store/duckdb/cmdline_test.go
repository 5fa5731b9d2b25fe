package duckdb

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func roundTrip(t *testing.T, base, s string) int {
	t.Helper()
	tb, sh := shapeOf(base), shapeOf(s)
	if !sameShape(&tb, &sh) {
		if tb.key == sh.key {
			t.Fatalf("%q and %q: same key, other shapes", base, s)
		}
		return -1
	}
	args := encodeArgs(nil, &tb, &sh)
	got, err := decodeArgs(&tb, args)
	if err != nil || got != s {
		t.Fatalf("%q against %q: decoded %q, %v", s, base, got, err)
	}
	return len(args)
}

func TestCmdlineTemplates(t *testing.T) {
	base := "/usr/lib/jvm/java-17/bin/java -Xmx820m -Djava.io.tmpdir=/data/yarn/local/usercache/alice/appcache/" +
		"application_1796219078116_0003/container_e01_1796219078116_0003_01_000002/tmp " +
		"org.apache.hadoop.mapred.YarnChild 10.0.0.17 40123 attempt_1796219078116_0003_m_000000_0 2"
	other := strings.NewReplacer("0003", "0042", "000002", "000117", "_m_000000_0", "_m_000115_0", "40123", "40555",
		"820", "1640").Replace(base)
	if n := roundTrip(t, base, base); n != 0 {
		t.Errorf("the template itself takes %d bytes of arguments, want 0", n)
	}
	if n := roundTrip(t, base, other); n <= 0 || n > 30 {
		t.Errorf("a sibling task's command line takes %d bytes of arguments (of %d)", n, len(other))
	}
	for _, c := range [][2]string{
		{"a1b22c333", "a9b00c000001"},
		{"1", "0123456789012345678901234567890"},
		{"x", "x"},
		{"", ""},
		{"日本1語", "日本22語"},
		{"007 007 007", "008 008 009"},
	} {
		roundTrip(t, c[0], c[1])
	}
	// Other shapes are told apart.
	if roundTrip(t, "a1b", "a1c") != -1 || roundTrip(t, "a1b", "ab") != -1 || roundTrip(t, "a1b2", "a1b") != -1 {
		t.Error("command lines of other shapes taken as one")
	}
	// Random command lines against random templates of their shape.
	rng := rand.New(rand.NewPCG(1, 2))
	digits := func() string {
		var b strings.Builder
		for n := 1 + rng.IntN(15); n > 0; n-- {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		return b.String()
	}
	for i := 0; i < 2000; i++ {
		parts := 1 + rng.IntN(8)
		var a, b strings.Builder
		for p := 0; p < parts; p++ {
			text := []string{"-x", "/", "é", " ", "_e"}[rng.IntN(5)]
			a.WriteString(text)
			b.WriteString(text)
			d := digits()
			a.WriteString(d)
			if rng.IntN(2) == 0 {
				d = digits()
			}
			b.WriteString(d)
		}
		roundTrip(t, a.String(), b.String())
	}
}

func FuzzCmdlineArgs(f *testing.F) {
	f.Add("java -Xmx1g app_1_2 container_1_2_3", []byte{0, 4, 0x12})
	f.Fuzz(func(t *testing.T, base string, args []byte) {
		sh := shapeOf(base)
		s, err := decodeArgs(&sh, args)
		if err != nil {
			return
		}
		// What decodes has base's shape, and encodes to what decodes to it again.
		got := shapeOf(s)
		if !sameShape(&sh, &got) {
			t.Fatalf("decoded %q, not of the shape of %q", s, base)
		}
		again, err := decodeArgs(&sh, encodeArgs(nil, &sh, &got))
		if err != nil || again != s {
			t.Fatalf("%q: %q, %v", s, again, err)
		}
	})
}
