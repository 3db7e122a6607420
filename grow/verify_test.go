package grow

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/internal/sock"
)

// TestVerifySeesMoveInProgress: a port whose sequence count a writer left
// odd is reported, not waited on.
func TestVerifySeesMoveInProgress(t *testing.T) {
	g := New([4]uint64{1, 2, 3, 4}, AlwaysIndex, 5, &bind.Occupancy{})
	pr := g.LockPort(53)
	defer g.Unlock(pr)
	sk := new(sock.Socket)
	e := &sock.Entry{Face: sock.Face{Port: 53, Flags: sock.HasV4, V4: 10<<24 | 1, V6: sock.Map4(10<<24 | 1), Ref: sock.Ref{Sock: sk}}}
	sk.Cur.Store(e)
	g.Link(pr, e)
	var errs []string
	verify := func() {
		errs = nil
		g.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	}
	verify()
	require.Empty(t, errs)
	pr.s.list.Seq.Begin()
	verify()
	require.Equal(t, []string{"port 53: move in progress"}, errs)
	pr.s.list.Seq.End()
	verify()
	require.Empty(t, errs)
}

// TestVerifySeesConnectedInGroup: an entry that is connected and in an
// SO_REUSEPORT group is reported. Lookup4 takes a 4-tuple match without
// asking its group for a flow's member, which is right only while no
// connected entry has one.
func TestVerifySeesConnectedInGroup(t *testing.T) {
	g := New([4]uint64{1, 2, 3, 4}, AlwaysIndex, 5, &bind.Occupancy{})
	pr := g.LockPort(53)
	defer g.Unlock(pr)
	sk := new(sock.Socket)
	e := &sock.Entry{Face: sock.Face{Port: 53, Flags: sock.HasV4 | sock.ReusePort, V4: 10<<24 | 1, V6: sock.Map4(10<<24 | 1), Ref: sock.Ref{Sock: sk}}}
	sk.Cur.Store(e)
	g.Link(pr, e)
	var errs []string
	verify := func() {
		errs = nil
		g.Verify(func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	}
	verify()
	require.Empty(t, errs)
	require.NotNil(t, e.Group, "a ReusePort entry joins a group when linked")
	e.Flags |= sock.Connected // what no writer does: connected, still in its group
	verify()
	require.Contains(t, errs, "connected entry 10.0.0.1:53 in an SO_REUSEPORT group")
}
