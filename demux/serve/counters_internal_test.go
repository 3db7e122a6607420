package serve

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCountersAddToTheirField: each of a listener's counts adds to the
// Stats field of its name and to no other, and every field that a
// listener counts is fed. A count added to the wrong field (two swapped
// in statsFields) or to none fails here even where no end-to-end test
// produces that count.
func TestCountersAddToTheirField(t *testing.T) {
	fields := map[int]string{
		nReceived: "Received", nDelivered: "Delivered", nUnmatched: "Unmatched",
		nUnmatchedMulti: "UnmatchedMulticast", nTruncated: "Truncated",
		nReplies: "Replies", nReplyErrors: "ReplyErrors", nReadErrors: "ReadErrors",
		nUnhandled: "Unhandled", nICMPSent: "ICMPSent", nICMPLimited: "ICMPLimited",
		nICMPErrors: "ICMPErrors", nKernelDrops: "KernelDrops",
	}
	assert.Len(t, fields, nCopies, "a count that Stats adds up is missing from this test")
	for i, name := range fields {
		var c counters
		c[i].Store(7)
		c[nCopies].Store(1) // counted for tests only, never in Stats
		st := Stats{Replies: 3}
		c.addTo(&st)
		want := Stats{Replies: 3}
		f := reflect.ValueOf(&want).Elem().FieldByName(name)
		if assert.True(t, f.IsValid(), "no Stats field %s", name) {
			f.SetUint(f.Uint() + 7)
		}
		assert.Equal(t, want, st, "count %s", name)
	}
}
