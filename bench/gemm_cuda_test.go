package bench

import "testing"

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		v    float32
		want uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {1 + 1.0/256, 0x3f80}, {1 + 3.0/256, 0x3f82}, {1 + 1.0/128, 0x3f81}} {
		if got := bf16(c.v); got != c.want {
			t.Errorf("bf16(%g) = %#x, want %#x", c.v, got, c.want)
		}
	}
}
