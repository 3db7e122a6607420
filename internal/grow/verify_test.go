package grow

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lookup"
)

// linkedForVerify links one entry on 10.0.0.1:53 with the given flags in a
// new engine, under its port's lock (released when the test ends), and
// returns the port's slot, the entry, and a verify that returns what the
// engine's Verify reports.
func linkedForVerify(t *testing.T, flags uint8) (*portSlot, *lookup.Entry, func() []string) {
	g := New([4]uint64{1, 2, 3, 4}, AlwaysIndex, 5, &bind.Occupancy{}, bind.NewRand(nil))
	pr := g.LockPort(53)
	t.Cleanup(func() { g.Unlock(pr) })
	sk := new(lookup.Socket)
	e := &lookup.Entry{Face: lookup.Face{Port: 53, Flags: lookup.HasV4 | flags, V4: 10<<24 | 1, V6: lookup.Map4(10<<24 | 1), Ref: lookup.Ref{Sock: sk}}}
	sk.Cur.Store(e)
	g.Link(pr, e)
	verify := func() []string {
		var errs []string
		g.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
		return errs
	}
	return pr.s, e, verify
}

// TestVerifySeesMoveInProgress: a port whose sequence count a writer left
// odd is reported, not waited on.
func TestVerifySeesMoveInProgress(t *testing.T) {
	ps, _, verify := linkedForVerify(t, 0)
	require.Empty(t, verify())
	ps.list.Seq.Begin()
	require.Equal(t, []string{"port 53: move in progress"}, verify())
	ps.list.Seq.End()
	require.Empty(t, verify())
}

// TestVerifySeesConnectedInGroup: an entry that is connected and in an
// SO_REUSEPORT group is reported. Lookup4 takes a 4-tuple match without
// asking its group for a flow's member, which is right only while no
// connected entry has one.
func TestVerifySeesConnectedInGroup(t *testing.T) {
	_, e, verify := linkedForVerify(t, lookup.ReusePort)
	require.Empty(t, verify())
	require.NotNil(t, e.Group, "a ReusePort entry joins a group when linked")
	e.Flags |= lookup.Connected // what no writer does: connected, still in its group
	require.Contains(t, verify(), "connected entry 10.0.0.1:53 in an SO_REUSEPORT group")
}
