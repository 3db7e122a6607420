package grow

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/udpdemux/udpdemux/lookup"
)

// TestKeyComparisons: addrIs and connIs, which the indexes call on a hash
// match, accept a value's own key and refuse a key that differs from it
// in any one part. The hash makes such a key rare in one chain, not
// impossible, so each part must be compared.
func TestKeyComparisons(t *testing.T) {
	v4 := uint32(10<<24 | 1)
	peer := lookup.Map4(172<<24 | 16<<16 | 9)
	faces := map[string]lookup.Face{
		"IPv4":              {Port: 53, Flags: lookup.HasV4, V4: v4, V6: lookup.Map4(v4)},
		"IPv6":              {Port: 53, Flags: lookup.Is6 | lookup.HasV6 | lookup.V6Only, V6: lookup.Addr16{Hi: 0x20010db8 << 32, Lo: 1}},
		"dual-stack ::":     {Port: 53, Flags: lookup.Is6 | lookup.HasV4 | lookup.HasV6, V6: lookup.Wild6},
		"IPv4 on a device":  {Port: 53, Flags: lookup.HasV4, V4: v4, V6: lookup.Map4(v4), Device: 3},
		"connected IPv4":    {Port: 53, Flags: lookup.HasV4 | lookup.Connected, V4: v4, V6: lookup.Map4(v4), Remote: peer, RemotePort: 4000},
		"connected mapped6": {Port: 53, Flags: lookup.Is6 | lookup.HasV4 | lookup.Connected, V4: v4, V6: lookup.Map4(v4), Remote: peer, RemotePort: 4000},
	}
	for name, f := range faces {
		t.Run(name, func(t *testing.T) {
			e := &lookup.Entry{Face: f}
			a := addrKey{lookup.KeyOf(f.Flags, f.V4, f.V6), f.Port, f.Device}
			c := connKey{local: a.addr, remote: f.Remote, lport: f.Port, rport: f.RemotePort}
			assert.Equal(t, a, addrKeyOf(e))
			assert.Equal(t, c, connKeyOf(e))
			assert.True(t, addrIs(e, a))
			assert.True(t, connIs(e, c))

			otherAddr := lookup.Map4(v4 + 1)
			for what, k := range map[string]addrKey{
				"address": {otherAddr, a.port, a.dev},
				"port":    {a.addr, a.port + 1, a.dev},
				"device":  {a.addr, a.port, a.dev + 7},
			} {
				assert.False(t, addrIs(e, k), "another %s", what)
			}
			for what, k := range map[string]connKey{
				"local address":  {local: otherAddr, remote: c.remote, lport: c.lport, rport: c.rport},
				"local port":     {local: c.local, remote: c.remote, lport: c.lport + 1, rport: c.rport},
				"remote address": {local: c.local, remote: lookup.Map4(1), lport: c.lport, rport: c.rport},
				"remote port":    {local: c.local, remote: c.remote, lport: c.lport, rport: c.rport + 1},
			} {
				assert.False(t, connIs(e, k), "another %s", what)
			}
		})
	}
}
