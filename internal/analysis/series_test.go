package analysis

import (
	"math"
	"testing"
)

func TestLinearFit(t *testing.T) {
	var x, y []float64
	for i := 0; i < 20; i++ {
		x = append(x, 1.7e9+float64(i)*0.5) // unix seconds
		y = append(y, 100e6+16e6*float64(i)*0.5)
	}
	slope, icept, r2 := linearFit(x, y)
	if math.Abs(slope-16e6) > 1 || math.Abs(icept+slope*x[0]-100e6) > 10 || r2 < 0.999 {
		t.Errorf("slope %g, value at x0 %g, r2 %g", slope, icept+slope*x[0], r2)
	}
	if _, _, r2 := linearFit([]float64{1, 2, 3}, []float64{5, 5, 5}); r2 != 0 {
		t.Errorf("flat: r2 %g", r2)
	}
}
