package grow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// FuzzMap replays a sequence of puts (of values with and without more
// pointers), deletes and gets against a Go map, under hashes that the
// input makes collide in the line bits, the tag bits or both, so that keys
// fill lines and overflow, move to chains and through resizes. After every
// write the map must pass Check, and at the end hold exactly the model's
// keys and values, whether read by Get or by All.
func FuzzMap(f *testing.F) {
	f.Add(byte(0), []byte{0, 1, 0, 2, 1, 1, 2, 1, 3, 1})
	f.Add(byte(1), []byte{0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 1, 3, 2, 1, 0, 8, 1, 8, 2, 8})
	f.Add(byte(2), []byte{0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15, 0, 16, 0, 17, 2, 9, 2, 10})
	f.Add(byte(3), []byte{1, 1, 1, 2, 1, 3, 0, 1, 0, 2, 2, 3, 3, 3})
	f.Fuzz(func(t *testing.T, mode byte, ops []byte) {
		// Which hash bits the keys keep: all; none (one line, one
		// tag); the top byte only (lines, one tag); the bits below it
		// only (every key in line 0 while the table has at most 256
		// lines, with tags of their own).
		masks := []uint64{^uint64(0), 0, 0xff00_0000_0000_0000, 0x00ff_ffff_ffff_ffff}
		mask := masks[int(mode)%len(masks)]
		hf := func(k int) uint64 { return mix(k) & mask }
		m := newTestMap(hf)
		type val struct{ v, more int }
		model := map[int]val{}
		for i := 0; i+1 < len(ops); i += 2 {
			k := int(ops[i+1])
			v := i
			switch ops[i] % 4 {
			case 0:
				m.put(k, v)
				model[k] = val{v, 0}
			case 1:
				more := 1 + int(ops[i])/4%3
				m.putVal(k, v, more)
				model[k] = val{v, more}
			case 2:
				m.del(k)
				delete(model, k)
			case 3:
				v, more, ok := m.get(k)
				w, in := model[k]
				require.Equal(t, in, ok, "key %d", k)
				require.Equal(t, w, val{v, more}, "key %d", k)
				continue
			}
			require.NoError(t, m.Check(), "after op %d", i/2)
		}
		require.Equal(t, len(model), m.Len())
		got := map[int]val{}
		m.All(func(x Val[kv]) bool {
			more := 0
			if x.Rest != nil {
				more = len(*x.Rest)
			}
			got[x.First.k] = val{x.First.v, more}
			return true
		})
		if d := cmp.Diff(model, got, cmp.AllowUnexported(val{})); d != "" {
			t.Fatalf("All differs from the model (-want +got):\n%s", d)
		}
		for k, w := range model {
			v, more, ok := m.get(k)
			require.True(t, ok, "key %d", k)
			require.Equal(t, w, val{v, more}, "key %d", k)
		}
	})
}
