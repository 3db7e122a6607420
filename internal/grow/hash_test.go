package grow

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lookup"
)

// TestKeyHashesSpread: the hashes of addrs and conns keys that differ in
// one field only — consecutive IPv4 or IPv6 addresses, local or remote,
// consecutive ports — fill a table's lines as random hashes would (4 096
// keys in 1 024 lines leave about 19 empty; the test allows 60), and fill
// the 7 low bits that the index (Map) takes for tags as well; and the same key hashes
// differently under another engine's secret seeds.
func TestKeyHashesSpread(t *testing.T) {
	const n, lineBits, tagBits = 4096, 10, 7
	g := New([4]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0x2545f4914f6cdd1d}, AlwaysIndex, 1, &bind.Occupancy{}, bind.NewRand(nil))
	g2 := New([4]uint64{0xd6e8feb86659fd93, 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3}, AlwaysIndex, 1, &bind.Occupancy{}, bind.NewRand(nil))
	v4 := func(i int) lookup.Addr16 { return lookup.Map4(10<<24 | uint32(i)) }
	v6 := func(i int) lookup.Addr16 { return lookup.Addr16{Hi: 0x2001_0db8 << 32, Lo: uint64(i)} }
	conn := func(local, remote lookup.Addr16, lport, rport int) connKey {
		return connKey{local: local, remote: remote, lport: uint16(lport), rport: uint16(rport)}
	}
	cases := []struct {
		name  string
		conns bool
		addr  func(i int) addrKey
		conn  func(i int) connKey
	}{
		{name: "addrs, IPv4 addresses", addr: func(i int) addrKey { return addrKey{v4(i), 53, 0} }},
		{name: "addrs, ports", addr: func(i int) addrKey { return addrKey{v4(1), uint16(i), 0} }},
		{name: "addrs, IPv6 addresses", addr: func(i int) addrKey { return addrKey{v6(i), 53, 0} }},
		{name: "addrs, IPv6 ports", addr: func(i int) addrKey { return addrKey{v6(1), uint16(i), 0} }},
		{name: "addrs, IPv4 devices", addr: func(i int) addrKey { return addrKey{lookup.Wild4, 53, int32(i + 1)} }},
		{name: "addrs, IPv6 devices", addr: func(i int) addrKey { return addrKey{v6(1), 53, int32(i + 1)} }},
		{name: "conns, IPv4 remote addresses", conns: true, conn: func(i int) connKey { return conn(v4(1), v4(i), 443, 40000) }},
		{name: "conns, IPv4 local addresses", conns: true, conn: func(i int) connKey { return conn(v4(i), v4(1), 443, 40000) }},
		{name: "conns, remote ports", conns: true, conn: func(i int) connKey { return conn(v4(1), v4(2), 443, i) }},
		{name: "conns, local ports", conns: true, conn: func(i int) connKey { return conn(v4(1), v4(2), i, 40000) }},
		{name: "conns, IPv6 remote addresses", conns: true, conn: func(i int) connKey { return conn(v6(1), v6(i), 443, 40000) }},
		{name: "conns, IPv6 remote ports", conns: true, conn: func(i int) connKey { return conn(v6(1), v6(2), 443, i) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hash := func(g *Engine, i int) uint64 {
				if c.conns {
					k := c.conn(i)
					return g.connHash(&k)
				}
				return g.addrHash(c.addr(i))
			}
			lines := map[uint64]bool{}
			tags := map[uint64]bool{}
			same := 0
			for i := range n {
				h := hash(g, i)
				lines[h>>(64-lineBits)] = true
				tags[h&(1<<tagBits-1)] = true
				if h == hash(g2, i) {
					same++
				}
			}
			assert.GreaterOrEqual(t, len(lines), 1<<lineBits-60, fmt.Sprintf("lines used of %d", 1<<lineBits))
			assert.Equal(t, 1<<tagBits, len(tags), "tags used")
			assert.Zero(t, same, "keys that hash alike under other seeds")
		})
	}
}
