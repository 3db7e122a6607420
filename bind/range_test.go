package bind

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllowedWord checks the word form that census and kthFree read against
// allowed, port by port, for random ranges with and without reserved ports.
func TestAllowedWord(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		lo := uint16(1 + r.IntN(65535))
		hi := lo + uint16(r.IntN(int(65535-lo)+1))
		var reserved []uint16
		for range r.IntN(3) * 20 {
			reserved = append(reserved, lo+uint16(r.IntN(int(hi-lo)+1)))
		}
		rg, err := NewRange(lo, hi, reserved)
		require.NoError(t, err)
		for w := range words {
			got := rg.allowedWord(w)
			for b := range 64 {
				p := uint16(w<<6 | b)
				require.Equal(t, rg.allowed(p), got&(1<<b) != 0, "range %d-%d port %d", lo, hi, p)
			}
		}
	}
}
