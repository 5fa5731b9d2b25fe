package store

import (
	"encoding/json"
	"testing"
)

func TestTimeJSON(t *testing.T) {
	for _, tc := range []struct {
		t    Time
		want string
	}{{0, `null`}, {1700000000123, `"2023-11-14T22:13:20.123Z"`}, {1, `"1970-01-01T00:00:00.001Z"`}} {
		b, err := json.Marshal(tc.t)
		if err != nil || string(b) != tc.want {
			t.Errorf("%d: %s (%v), want %s", tc.t, b, err, tc.want)
		}
		var back Time
		if err := json.Unmarshal(b, &back); err != nil || back != tc.t {
			t.Errorf("%s read back as %d (%v)", b, back, err)
		}
	}
}
