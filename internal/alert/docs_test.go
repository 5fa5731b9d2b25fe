package alert

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Alertmanager configuration docs/operations.md suggests is one
// Alertmanager takes (amtool, from Debian's prometheus-alertmanager).
func TestDocsRoute(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "An Alertmanager route for them")
	if i < 0 {
		t.Fatal("docs/operations.md has no Alertmanager route")
	}
	doc = doc[i:]
	start := strings.Index(doc, "```yaml\n")
	end := strings.Index(doc[start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no yaml block after it")
	}
	p := filepath.Join(t.TempDir(), "alertmanager.yml")
	if err := os.WriteFile(p, []byte(doc[start+8:start+8+end]), 0o644); err != nil {
		t.Fatal(err)
	}
	amtool := "/usr/bin/amtool"
	if _, err := os.Stat(amtool); err != nil {
		t.Fatalf("amtool is not installed (scripts/test-deps.sh installs prometheus-alertmanager): %v", err)
	}
	if out, err := exec.Command(amtool, "check-config", p).CombinedOutput(); err != nil {
		t.Errorf("amtool check-config: %v\n%s", err, out)
	}
}
