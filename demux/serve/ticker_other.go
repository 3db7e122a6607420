//go:build !linux

package serve

import (
	"net"
	"sync"
	"time"
)

// ticker ticks every period while started: a runtime timer outside
// Linux.
type ticker struct {
	t      *time.Ticker
	done   chan struct{}
	closed sync.Once
}

func newTicker() (*ticker, error) {
	t := time.NewTicker(time.Hour)
	t.Stop()
	return &ticker{t: t, done: make(chan struct{})}, nil
}

func (t *ticker) start(period time.Duration) { t.t.Reset(period) }

func (t *ticker) stop() { t.t.Stop() }

// wait waits for the next tick; it fails once t is closed.
func (t *ticker) wait() error {
	select {
	case <-t.t.C:
		return nil
	case <-t.done:
		return net.ErrClosed
	}
}

// close ends t, and any wait in progress.
func (t *ticker) close() { t.closed.Do(func() { close(t.done) }) }
