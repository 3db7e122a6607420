package sock

import "sync/atomic"

// Group is an SO_REUSEPORT group: unconnected ReusePort entries with the
// same address, port, device, family, V6Only and owner. Members is
// published copy-on-write, in join order, so a lookup can pick one member
// by flow hash without a lock.
type Group struct {
	members atomic.Pointer[[]*Entry]
}

// Members returns the current members, oldest first. The slice must not be
// modified.
func (g *Group) Members() []*Entry {
	if p := g.members.Load(); p != nil {
		return *p
	}
	return nil
}

// Add appends e. The caller holds the primary slot lock of the group's port.
func (g *Group) Add(e *Entry) {
	old := g.Members()
	m := make([]*Entry, len(old), len(old)+1)
	copy(m, old)
	m = append(m, e)
	g.members.Store(&m)
}

// Remove drops e and reports how many members remain. The caller holds the
// primary slot lock of the group's port.
func (g *Group) Remove(e *Entry) int {
	old := g.Members()
	m := make([]*Entry, 0, len(old))
	for _, x := range old {
		if x != e {
			m = append(m, x)
		}
	}
	g.members.Store(&m)
	return len(m)
}
