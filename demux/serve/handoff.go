package serve

import (
	"sync"
	"time"

	"github.com/udpdemux/udpdemux/demux"
)

// A kernel socket has one reader goroutine, which reads a batch and runs
// the handlers of its datagrams one after the other. So that a slow
// handler holds up only its own socket's datagrams, the server's watcher
// looks at the reader every watchTick while it handles a batch (the
// reader arms itself when a batch starts and disarms when it ends, and
// the watcher ticks only while some reader is armed, so that an idle
// server costs no wake-ups); a reader found in the same unicast handler
// call at two looks in a row is handed off: a new reader
// (the helper) takes over the rest of its batch and the kernel socket,
// while the old goroutine finishes the slow call. Until it has, the
// socket of that call is stuck: the readers set its datagrams aside for
// the old goroutine (deferTo), which handles them after the call, in
// order, sends its replies, and ends. One socket's calls thus stay one at
// a time and in arrival order, and its replies in order, while other
// sockets wait at most about two ticks for a slow call.
//
// The ticks are the watcher's own ticker's rather than a runtime timer
// per reader, which fires late when every goroutine sleeps, as in a slow
// handler that waits (see ticker).
//
// Calls for multicast datagrams are not handed off, since the table's
// iteration over the receivers is in progress in the slow call's
// goroutine; but a multicast datagram for a stuck socket is set aside for
// it as a unicast one is.

const (
	running   uint32 = iota // not in a handler call that may be handed off
	inCall                  // in a unicast handler call
	handedOff               // the rest of the batch was handed off
)

// watchTick is how often a reader handling a batch is looked at; a call
// is handed off between one and two ticks after it started. While some
// reader of the server handles a batch, the watcher wakes this often.
const watchTick = 250 * time.Microsecond

// maxHandedOff is the most calls of one kernel socket's that are handed
// off at a time. Each has a goroutine and a batch's buffers until it
// returns, so that datagrams to many sockets whose handlers are slow
// cannot make a port take memory without bound: past it, the reader
// waits for its call, as one that is not handed off does.
const maxHandedOff = 32

// arm starts looking at l's reader, which begins a batch.
func (l *listener[V]) arm() {
	if l.s.h == nil {
		return // no handler calls to hand off
	}
	l.armed.Store(true) // before the registered flag is read: see watcher.keep
	if !l.registered.Load() {
		if w := l.s.watching(); w != nil {
			w.add(l)
		}
	}
}

// watching returns s's watcher, made on first use; nil if it cannot be
// made (no descriptor left for its ticker): the next arm tries again, and
// meanwhile slow calls are not handed off.
func (s *Server[V]) watching() *watcher[V] {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.watcher == nil {
		if tk, err := newTicker(); err == nil {
			s.watcher = &watcher[V]{tk: tk, wake: make(chan struct{}, 1), done: make(chan struct{})}
			go s.watcher.run()
		}
	}
	return s.watcher
}

// disarm stops looking at l's reader, whose batch ended. A look already
// under way may still run, once; the next tick forgets l.
func (l *listener[V]) disarm() { l.armed.Store(false) }

// deferTo sets datagram i of b aside for the goroutine whose call on s
// was handed off, if s has one, and reports whether it did.
func (l *listener[V]) deferTo(s *demux.Socket[V], b *batch[V], i int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	owner := l.stuck[s]
	if owner == nil {
		return false
	}
	owner.deferred = append(owner.deferred, b.copyOf(i))
	return true
}

// handedOff runs in the goroutine whose call on b.sock was handed off,
// after that call: it handles the datagrams set aside for b.sock meanwhile,
// sends the batch's replies, and releases b.sock to the readers.
func (b *batch[V]) handedOff() {
	l := b.l
	for {
		l.mu.Lock()
		if len(b.deferred) == 0 {
			l.mu.Unlock()
			// The replies leave before the socket is released, so that
			// a later datagram's reply cannot overtake them.
			b.finish()
			l.mu.Lock()
			if len(b.deferred) == 0 {
				delete(l.stuck, b.sock)
				l.nstuck.Add(-1)
				l.mu.Unlock()
				return
			}
		}
		p := b.deferred[0]
		b.deferred[0] = nil
		b.deferred = b.deferred[1:]
		l.mu.Unlock()
		if s := b.sock; s.Closed() {
			b.pending[nUnmatched]++
		} else {
			l.c[nDelivered].Add(1)
			b.call(b.request(p, s, s.Value()))
		}
		l.s.conns.pool.Put(p)
	}
}

// takeRest copies the undelivered rest of b, whose goroutine is in a
// handed-off call and no longer touches it, into h, a fresh batch.
func (h *batch[V]) takeRest(b *batch[V]) {
	u := 0
	for k := b.next; k < b.n; k++ {
		h.kind[k-b.next] = b.kind[k]
		b.pk[k].copyTo(h.pk[k-b.next])
		if b.kind[k] == unicast {
			h.out[u] = b.out[b.nextU+u]
			u++
		}
	}
	h.next, h.nextU, h.n = 0, 0, b.n-b.next
}

// look hands l's reader off if it is in the call it was in at the last
// look. The watcher calls it every tick while l is armed.
func (l *listener[V]) look() {
	if !l.armed.Load() {
		return
	}
	if !l.looking.TryLock() {
		// putBatch holds it, or a look that a test runs: the next tick
		// looks again, since l stays registered while armed.
		return
	}
	defer l.looking.Unlock()
	s, b := l.s, l.active.Load()
	if b == nil {
		return
	}
	if b.state.Load() != inCall {
		b.seen = 0
		return
	}
	if c := b.calls.Load() + 1; b.seen != c {
		b.seen = c
		return
	}
	s.mu.Lock()
	full := l.goroutines > maxHandedOff // the reader and the handed-off calls
	s.mu.Unlock()
	if full {
		return
	}
	h := s.getBatch(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	l.mu.Lock()
	if s.stopped || l.closing.Load() || !b.state.CompareAndSwap(inCall, handedOff) {
		// Stopping, or the call ended meanwhile.
		l.mu.Unlock()
		// No look knew h: back to the pool without putBatch, which
		// would wait for this look to end.
		s.batches.put(h)
		return
	}
	// b.sock is stuck from the hand-off on, in the same hold of l.mu:
	// b's goroutine, whose call may end at once, finds it there when it
	// takes l.mu in handedOff, and releases it.
	if l.stuck == nil {
		l.stuck = map[*demux.Socket[V]]*batch[V]{}
	}
	l.stuck[b.sock] = b
	l.nstuck.Add(1)
	l.mu.Unlock()
	// b's goroutine is in its handler, or in handedOff, and will not
	// touch the rest of the batch, nor its cursor, again.
	h.takeRest(b)
	// The replies queued so far need not wait for the slow call.
	b.mu.Lock()
	b.flush()
	b.mu.Unlock()
	l.active.Store(h)
	l.begin() // h's batch, which b's goroutine ends its share of
	// The helper's batch is being handled: keep looking (look re-arms).
	l.armed.Store(true)
	l.goroutines++
	s.wg.Add(1)
	go l.run(h)
}

// watcher looks at the server's armed listeners every watchTick, from one
// goroutine, and only while one is armed: an idle server's ticker is
// stopped. A listener stays registered from its arm to the first tick
// that finds it disarmed, so that a tick needs no lock of the reader's,
// and a reader that arms batch after batch registers once.
type watcher[V any] struct {
	tk   *ticker
	wake chan struct{} // a listener registered while the ticker was stopped
	done chan struct{} // closed by close
	// ls are the registered listeners, and on is set while the ticker
	// runs; both under mu. A listener's registered flag is set while it
	// is in ls.
	mu sync.Mutex
	ls []*listener[V]
	on bool
}

// add registers l, which armed and found itself unregistered.
func (w *watcher[V]) add(l *listener[V]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.registered.Load() {
		return // a tick kept it, seeing it armed
	}
	l.registered.Store(true)
	w.ls = append(w.ls, l)
	if !w.on {
		w.on = true
		w.tk.start(watchTick)
		poke(w.wake)
	}
}

// run ticks while listeners are registered, until close.
func (w *watcher[V]) run() {
	var looks []*listener[V]
	for {
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
		for {
			if w.tk.wait() != nil {
				return
			}
			looks = w.keep(looks[:0])
			if len(looks) == 0 {
				break
			}
			for i, l := range looks {
				l.look()
				looks[i] = nil
			}
		}
	}
}

// keep drops the listeners that are no longer armed, appends the others
// to looks and returns it; with none left, it stops the ticker.
func (w *watcher[V]) keep(looks []*listener[V]) []*listener[V] {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.ls[:0]
	for _, l := range w.ls {
		// Unregistered first, then armed asked: an arm in between either
		// sees the flag still set, and then this load sees it armed, or
		// sees it clear and registers again (add, which waits for mu).
		l.registered.Store(false)
		if l.armed.Load() {
			l.registered.Store(true)
			kept = append(kept, l)
			looks = append(looks, l)
		}
	}
	clear(w.ls[len(kept):])
	w.ls = kept
	if len(kept) == 0 {
		w.on = false
		w.tk.stop()
	}
	return looks
}

func (w *watcher[V]) close() {
	close(w.done)
	w.tk.close()
}
