package grow

import (
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/udpdemux/udpdemux/bind"
	"github.com/udpdemux/udpdemux/lockorder"
	"github.com/udpdemux/udpdemux/lookup"
)

// Strategy thresholds: how many sockets a port may hold before lookups and
// bind checks use the indexes instead of scanning the port's chain.
const (
	AlwaysScan  = math.MaxInt // one-phase
	AlwaysIndex = -1          // two-phase
)

// hybridSummaryMin is how many sockets a port may hold before the hybrid
// strategy's bind checks read a summary instead of scanning the port.
const hybridSummaryMin = 64

// addrKey keys the addrs index. An entry bound to a device is keyed by its
// device as well, so that sockets that differ only by device (one per VRF,
// tunnel or tenant interface) are as many keys, not as many classes of one
// key: a lookup reads the key of the datagram's interface and the key of
// no device, and never the others.
type addrKey struct {
	addr lookup.Addr16
	port uint16
	dev  int32
}

// connKey keys the 4-tuple index.
type connKey struct {
	local, remote lookup.Addr16
	lport, rport  uint16
}

// addrIs reports whether e, the first head of a key of addrs, is stored
// under k: whether k is e's key. Field by field, cheapest first, so that
// a mismatch is found before the costlier fields are read: rebuilding the
// whole key and comparing it made connected lookups measurably slower.
func addrIs(e *lookup.Entry, k addrKey) bool {
	return e.Port == k.port && e.Device == k.dev && lookup.KeyOf(e.Flags, e.V4, e.V6) == k.addr
}

// connIs reports whether e, the first head of a key of conns, is stored
// under k.
func connIs(e *lookup.Entry, k connKey) bool {
	return e.Port == k.lport && e.RemotePort == k.rport && e.Remote == k.remote &&
		lookup.KeyOf(e.Flags, e.V4, e.V6) == k.local
}

// addrKeyOf and connKeyOf return the key e is stored under.
func addrKeyOf(e *lookup.Entry) addrKey {
	return addrKey{lookup.KeyOf(e.Flags, e.V4, e.V6), e.Port, e.Device}
}

func connKeyOf(e *lookup.Entry) connKey {
	return connKey{local: lookup.KeyOf(e.Flags, e.V4, e.V6), remote: e.Remote, lport: e.Port, rport: e.RemotePort}
}

// heads is the newest entry of each class of one key: First, and the
// other classes, which few keys have, in Rest (nil if none). The index
// keeps a key's First in a position of a cache line that a lookup reads
// before the entry itself (index.go), so that a lookup costs that
// line and the entry, whose first line holds what it scores.
type heads Val[lookup.Entry]

// portSlot is what a lookup reads of a port: its chain and the filter of
// its connected entries' peers. Slots live in pages of 256 ports, made when a port of
// the page is first bound and kept after, so that a lookup reaches a
// port's chain in one load from a page it indexes directly — the chain
// head is in the slot, as in a fixed primary table — while a table with a
// few busy ports pays for a few pages only.
type portSlot struct {
	// list chains every entry on the port through N1, newest first; its
	// Seq counts moves of entries between indexes. It is marked while
	// two entries of the port share a 4-tuple (Port.shared4), so that a
	// scan may stop at a 4-tuple match while it is not.
	list lookup.Chain
	// peers filters the sources of datagrams that may have a socket of
	// the port in the 4-tuple index; nil until the first one enters it.
	peers atomic.Pointer[peerFilter]
	// devs filters the devices of the port's entries that addrs keys by
	// a device (see byDevice), as peers does their peers; nil until the
	// first one enters it.
	devs atomic.Pointer[peerFilter]
}

// page is the slots of 256 ports, and their records: recs[i] is the
// record of slots[i]'s port while it holds a socket, nil otherwise. Only
// writers read recs, which sit apart so that a slot stays half a cache
// line. A record is put in an empty place only, and taken out only by
// its holder, under its lock, marked dead.
type page struct {
	slots [256]portSlot
	recs  [256]atomic.Pointer[Port]
}

// Port is one port's record for writers. It exists while the port holds a
// socket.
type Port struct {
	s    *portSlot // the port's slot, which outlives the record
	mu   lockorder.Mutex
	port uint16
	dead bool // guarded by mu: no longer its page's record
	// shared4 counts the keys of conns on the port that hold more than
	// one entry; guarded by mu. The port's chain is marked while it is
	// not 0 (see shared4.go). An int32, beside port and dead, keeps the
	// record 48 bytes with ord.
	shared4 int32
	// ord is the Guard of the write that holds mu, or held it last (nil
	// while checking is off), through which the write takes its index
	// locks: the record is its holder's alone, and so can carry what the
	// write holds.
	ord *lockorder.Guard
	// cc is the port's bind-check summary, guarded by mu: nil until the
	// port first holds more than summaryMin sockets (see count), then
	// kept while it holds one. Most ports never have one, and a record
	// with the summary inline took 208 bytes, where it takes 48.
	cc     *bind.Summary
	groups map[groupKey]*lookup.Group // guarded by mu
}

// Engine is the growing storage. Its methods that take a *Port expect it
// locked, as LockPort and Ephemeral return it.
type Engine struct {
	pages [256]atomic.Pointer[page]
	nport atomic.Int64 // ports with a record
	npage atomic.Int64 // pages made
	addrs *Map[addrKey, lookup.Entry]
	conns *Map[connKey, lookup.Entry]

	// Secret words of the indexes' hashes: seed seeds the XXH64s; the
	// odd mulA and mulC finish the IPv6 address and IPv6 4-tuple hashes,
	// mulC the peer filter's too; all four key the folds of IPv4 keys.
	seed             uint64
	mulP, mulA, mulC uint64
	threshold        int
	flowSeed         uint64
	summaryMin       int // see InUse
	occ              *bind.Occupancy
	rand             *bind.Rand // bind(0)'s
}

// New returns an empty engine. seeds must be random and secret: they keep
// outsiders from aiming keys at one slot. threshold is the hybrid rule's
// (AlwaysScan, AlwaysIndex for the other strategies); flowSeed seeds the
// SO_REUSEPORT flow hash. occ is the occupancy index that bind(0) reads
// (package demux keeps it); bind(0) draws from rand.
func New(seeds [4]uint64, threshold int, flowSeed uint64, occ *bind.Occupancy, rand *bind.Rand) *Engine {
	g := &Engine{
		seed:       seeds[0],
		mulP:       seeds[1] | 1,
		mulA:       seeds[2] | 1,
		mulC:       seeds[3] | 1,
		threshold:  threshold,
		summaryMin: hybridSummaryMin,
		flowSeed:   flowSeed,
		occ:        occ,
		rand:       rand,
	}
	if threshold == AlwaysScan || threshold == AlwaysIndex {
		g.summaryMin = threshold
	}
	g.addrs = newMap(addrIs, g.addrHashOf)
	g.conns = newMap(connIs, g.connHashOf)
	return g
}

// addrHash returns the hash of the key k of addrs. An IPv4 key, 6 bytes,
// takes two multiply-folds; an IPv6 key finishes its address's XXH64
// (addrHash6).
func (g *Engine) addrHash(k addrKey) uint64 {
	if !k.addr.IsMapped() {
		return g.addrHash6(k)
	}
	return g.withDev(g.addrHash4(k.addr.V4(), k.port), k.dev)
}

// addrHash4 is addrHash of the key of the IPv4 address v4 and port, of no
// device.
func (g *Engine) addrHash4(v4 uint32, port uint16) uint64 {
	x := uint64(v4)<<16 | uint64(port)
	return fold(fold(x^g.seed, g.mulA)^g.mulP, x^g.mulC)
}

func (g *Engine) addrHash6(k addrKey) uint64 {
	return g.withDev((g.hashAddr(k.addr)^uint64(k.port))*g.mulA, k.dev)
}

// withDev mixes a device into the hash h of an address key: a key of no
// device, nearly every key, keeps h.
func (g *Engine) withDev(h uint64, dev int32) uint64 {
	if dev == 0 {
		return h
	}
	return fold(h^uint64(uint32(dev)), g.mulC)
}

// connHash returns the hash of the 4-tuple k. An IPv4 4-tuple, 12 bytes,
// takes two multiply-folds over its two words (the mixing of wyhash);
// any other 4-tuple combines its addresses' XXH64s (connHash6).
func (g *Engine) connHash(k *connKey) uint64 {
	if !k.local.IsMapped() || !k.remote.IsMapped() {
		return g.connHash6(k)
	}
	return g.connHash4(k.local.V4(), k.remote.V4(), k.lport, k.rport)
}

// connHash4 is connHash of the IPv4 4-tuple local:lport, remote:rport.
func (g *Engine) connHash4(local, remote uint32, lport, rport uint16) uint64 {
	a := uint64(local)<<32 | uint64(remote)
	b := uint64(lport)<<16 | uint64(rport)
	return fold(fold(a^g.seed, b^g.mulC)^g.mulA, a^g.mulP)
}

func (g *Engine) connHash6(k *connKey) uint64 {
	return (g.hashAddr(k.local)*g.mulA ^ g.hashAddr(k.remote) ^ uint64(k.lport)<<16 ^ uint64(k.rport)) * g.mulC
}

// fold multiplies a by b and folds the 128-bit product to 64 bits.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// addrHashOf and connHashOf return the hash of e's key in addrs and conns.
func (g *Engine) addrHashOf(e *lookup.Entry) uint64 {
	return g.addrHash(addrKeyOf(e))
}

func (g *Engine) connHashOf(e *lookup.Entry) uint64 {
	k := connKeyOf(e)
	return g.connHash(&k)
}

func (g *Engine) hashAddr(a lookup.Addr16) uint64 { return a.Hash(g.seed) }

// LockPort returns port p's record, locked, making one if p holds no
// socket: the start of a write, whose locks the record's Guard checks
// (see lockorder). Release it with Unlock.
func (g *Engine) LockPort(p uint16) *Port { return g.lockPort(p, lockorder.Begin()) }

// lockPort is LockPort for the write whose Guard is o.
func (g *Engine) lockPort(p uint16, o *lockorder.Guard) *Port {
	pg := g.makePage(p)
	s, rec := &pg.slots[p&255], &pg.recs[p&255]
	for {
		pr := rec.Load()
		if pr == nil {
			fresh := &Port{port: p, s: s}
			if !rec.CompareAndSwap(nil, fresh) {
				continue // another writer made it first
			}
			g.nport.Add(1)
			pr = fresh
		}
		o.Locking(lockorder.Port, &pr.mu).Lock()
		if !pr.dead {
			pr.ord = o
			return pr
		}
		o.Unlocking(lockorder.Port, &pr.mu).Unlock()
	}
}

// makePage returns port p's page, making it if need be. Writers of
// different ports may race to make a page; one wins.
func (g *Engine) makePage(p uint16) *page {
	pg := g.pages[p>>8].Load()
	if pg == nil {
		if g.pages[p>>8].CompareAndSwap(nil, new(page)) {
			g.npage.Add(1)
		}
		pg = g.pages[p>>8].Load()
	}
	return pg
}

// Unlock releases pr, dropping the record if its port holds no socket,
// and ends the write.
func (g *Engine) Unlock(pr *Port) {
	o := pr.ord
	g.release(pr)
	o.End()
}

// release is Unlock for a write that goes on: bind(0)'s search, which
// releases the ports it declines.
func (g *Engine) release(pr *Port) {
	if pr.s.list.Len() == 0 && !pr.dead {
		pr.dead = true
		g.pages[pr.port>>8].Load().recs[pr.port&255].Store(nil)
		g.nport.Add(-1)
	}
	// pr.ord stays until the next holder sets its own: a write that used
	// pr after this would take its index locks through a Guard that holds
	// no port record lock, and fail the check.
	pr.ord.Unlocking(lockorder.Port, &pr.mu).Unlock()
}

// port returns p's slot for a lookup, or nil if no socket was ever bound
// to a port of its page.
func (g *Engine) port(p uint16) *portSlot {
	if pg := g.pages[p>>8].Load(); pg != nil {
		return &pg.slots[p&255]
	}
	return nil
}

// Sizes reports the ports in use and the port slots made, and the keys
// and slots of the two indexes, for statistics.
func (g *Engine) Sizes() (ports, portSlots, addrs, addrSlots, conns, connSlots int) {
	return int(g.nport.Load()), 256 * int(g.npage.Load()), g.addrs.Len(), g.addrs.Slots(), g.conns.Len(), g.conns.Slots()
}
