package demux

import (
	"net/netip"
	"runtime"

	"github.com/udpdemux/udpdemux/lookup"
)

// engine is a storage's write side: it owns the chains, SO_REUSEPORT
// groups and bind-check indexes of its tables, and the
// protocol that moves an entry. fixed.Engine is one; grow.Engine the
// other. P is the engine's handle on a locked port, valid from
// LockPort or Ephemeral to Unlock.
//
// Writes reach it through writes, an interface call per operation; lookups
// never do, so they pay no interface call.
type engine[P locked] interface {
	// LockPort locks port and returns the handle.
	LockPort(port uint16) P
	// Unlock releases what the handle holds; it must not be used after.
	Unlock(P)
	// InUse reports whether a socket on the port conflicts with e, and
	// whether the check used an index rather than the port's chain.
	InUse(P, *lookup.Entry) (inUse, indexed bool)
	// Ephemeral chooses e's port, sets e.Port and returns the port
	// locked, or the zero P if no port of the range is free for e.
	Ephemeral(e *lookup.Entry) P
	// Link publishes the new entry e of a bind, unconnected, which joins
	// its SO_REUSEPORT group.
	Link(P, *lookup.Entry)
	// GroupOf returns the group the unconnected ReusePort entry e
	// belongs in, a new one if there is none.
	GroupOf(P, *lookup.Entry) *lookup.Group
	// Replace puts e, a new state of old's socket, in old's place.
	Replace(p P, old, e *lookup.Entry)
	// Unlink removes e.
	Unlink(P, *lookup.Entry)
	// Verify checks the engine's invariants, calling bad for each
	// violation, and returns the entries its tables hold.
	Verify(bad func(format string, args ...any)) map[*lookup.Entry]bool
}

// locked is an engine's handle on a locked port, which lists the port's
// entries.
type locked interface {
	comparable
	Entries(buf []*lookup.Entry) []*lookup.Entry
}

// writer is a table's write path over its engine: the part of each write
// that runs under the port's lock. Table's methods validate and call it.
type writer[V any] interface {
	bind(s *Socket[V], e *lookup.Entry, o Options) error
	connect(s *Socket[V], remote netip.AddrPort, local netip.Addr) error
	disconnect(s *Socket[V]) error
	setDevice(s *Socket[V], device int) error
	close(s *Socket[V]) error
	portSockets(port uint16, buf []*Socket[V]) []*Socket[V]
	withPort(port uint16, f func())
	verify(bad func(format string, args ...any)) map[*lookup.Entry]bool
}

// writes is the one write path, for either engine E.
type writes[V any, P locked, E engine[P]] struct {
	t *Table[V]
	e E
}

// verify is the engine's Verify.
func (w *writes[V, P, E]) verify(bad func(format string, args ...any)) map[*lookup.Entry]bool {
	return w.e.Verify(bad)
}

// withPort runs f with port locked, for a reader that writers kept from
// finishing without the lock, and then yields the processor, as a
// lookup's locked attempt does (see grow's unlockRead): the writer it
// kept waiting would otherwise wait for the end of the reader's time
// slice. f must not call back into the caller's code: a callback that
// panicked or used the table would hold the lock.
func (w *writes[V, P, E]) withPort(port uint16, f func()) {
	h := w.e.LockPort(port)
	defer func() {
		w.e.Unlock(h)
		runtime.Gosched()
	}()
	f()
}
