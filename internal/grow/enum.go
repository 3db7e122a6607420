package grow

import "github.com/udpdemux/udpdemux/lookup"

// Entries appends the entries on pr's port to buf, newest first. The
// caller holds pr locked, so the list is the port's at one instant.
func (pr *Port) Entries(buf []*lookup.Entry) []*lookup.Entry {
	for n := pr.s.list.First(); n != nil; n = n.Next.Load() {
		buf = append(buf, lookup.OfPrimary(n))
	}
	return buf
}
