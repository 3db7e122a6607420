package grow

import "github.com/udpdemux/udpdemux/internal/sock"

// Entries appends the entries on pr's port to buf, newest first. The
// caller holds pr locked, so the list is the port's at one instant.
func (pr *Port) Entries(buf []*sock.Entry) []*sock.Entry {
	for n := pr.s.list.First(); n != nil; n = n.Next.Load() {
		buf = append(buf, sock.OfPrimary(n))
	}
	return buf
}
