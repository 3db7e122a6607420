package demux_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/udpdemux/udpdemux/demux/demuxtest"
)

// byteSource is a rand.Source that plays back fuzz input, so that the
// fuzzer's mutations steer the operation generator's choices directly.
// Past the end of the input it goes on with a fixed generator: a constant
// stream could make rejection sampling loop for ever.
type byteSource struct {
	b    []byte
	rest rand.PCG
}

func (s *byteSource) Uint64() uint64 {
	if len(s.b) < 8 {
		return s.rest.Uint64()
	}
	v := binary.LittleEndian.Uint64(s.b)
	s.b = s.b[8:]
	return v
}

// FuzzOps decodes fuzz input into a sequence of operations — binds with
// options, bind(0), connects, closes, lookups, multicast lookups — and runs
// it on the table under every strategy and on the reference model, failing
// on any difference or any broken invariant.
func FuzzOps(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f"))
	seed := make([]byte, 512)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range seed {
		seed[i] = byte(r.Uint32())
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Generate once, against the first configuration's model, then
		// replay the same operations on every configuration.
		cfgs := demuxtest.Configs()
		r0, err := demuxtest.NewRunner(cfgs[0], 1)
		if err != nil {
			t.Fatal(err)
		}
		g := demuxtest.NewGenerator(r0, &byteSource{b: data, rest: *rand.NewPCG(uint64(len(data)), 7)})
		ops, err := g.Run(min(4+len(data)/8, 300))
		if err != nil {
			t.Fatalf("%s: op %d %v: %v\n%s", cfgs[0].Name, len(ops)-1, ops[len(ops)-1], err, demuxtest.Format(ops))
		}
		for _, c := range cfgs[1:] {
			if at, err := demuxtest.Run(c, 1, ops); err != nil {
				var mm *demuxtest.Mismatch
				if !errors.As(err, &mm) {
					t.Fatalf("%s: op %d: %v", c.Name, at, err)
				}
				t.Fatalf("%s: op %d: %v\n%s", c.Name, at, err, demuxtest.Format(ops[:at+1]))
			}
		}
	})
}
