package simulator

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RunDaemonIfRequested()
	os.Exit(m.Run())
}
