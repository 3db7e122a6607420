package serve

import "sync"

// watcher looks at the server's armed listeners every watchTick
// (handoff.go), from one goroutine, and only while one is armed: an idle
// server's ticker is stopped. A listener stays registered from its arm to
// the first tick that finds it disarmed, so that a tick needs no lock of
// the reader's, and a reader that arms batch after batch registers once.
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

func newWatcher[V any]() (*watcher[V], error) {
	tk, err := newTicker()
	if err != nil {
		return nil, err
	}
	w := &watcher[V]{tk: tk, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w, nil
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

// close ends the watcher's goroutine.
func (w *watcher[V]) close() {
	close(w.done)
	w.tk.close()
}
