//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/udpdemux/udpdemux/internal/model"
)

// TestKernelStaleHash4 checks what model.Strays claims, on the kernel:
// a socket that connected again stays in the 4-tuple slot of its first
// peer, and the 4-tuple lookup returns it, before a better-scoring socket,
// exactly when its first and current 4-tuples share a slot. s1 (bound to
// lo, so it scores more) and s0 are connected to the same peer; s0 first
// connected to another peer x. For most x the datagram goes to s1; the test
// tries x until s0 gets it, then checks that this x gives s0 again, that
// the next one gives s1, and that the model names s0 in Strays and s1
// in its lookup.
func TestKernelStaleHash4(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the 4-tuple slot check needs root in CI")
		}
		t.Skip("4-tuple slot check skipped: it needs root for a network namespace")
	}
	n, err := setupRnet(false)
	require.NoError(t, err)
	defer n.close()
	const port = 5900
	local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	peer := netip.MustParseAddrPort("127.0.0.1:40001")
	// first peer i: 60000 ports on each of 127.0.0.1, 127.0.0.2 and on,
	// 30 times the slots, so that none colliding is a chance of e^-30.
	var slots int
	n.th.Do(func() { slots, err = udpSlots() })
	require.NoError(t, err)
	tries := 30 * slots
	first := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(1 + i/60000)}), uint16(1024+i%60000))
	}
	s1First := netip.MustParseAddrPort("127.0.0.1:30000")
	skip := func(i int) bool { return first(i) == peer || first(i) == s1First }
	bind := func(dev int) (int, error) {
		fd, err := socket(false, 0)
		if err == nil {
			err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		}
		if err == nil && dev != 0 {
			err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, soBindToIfindex, dev)
		}
		if err == nil {
			err = syscall.Bind(fd, sockaddr(local))
		}
		return fd, err
	}
	connect2 := func(fd int, x netip.AddrPort) error {
		if err := syscall.Connect(fd, sockaddr(x)); err != nil {
			return err
		}
		return syscall.Connect(fd, sockaddr(peer))
	}
	// receiver connects a new s0 first to first(i), then to the peer,
	// sends from the peer and returns who got it.
	var s1 int
	receiver := func(i int) (string, error) {
		s0, err := bind(0)
		if err == nil {
			defer syscall.Close(s0)
			err = connect2(s0, first(i))
		}
		if err != nil {
			return "", err
		}
		return n.send(peer, local, []string{"s0", "s1"}, map[string]int{"s0": s0, "s1": s1})
	}
	found := -1
	n.th.Do(func() {
		if s1, err = bind(n.lo); err == nil {
			err = connect2(s1, s1First)
		}
		for i := 0; err == nil && i < tries && found < 0; i++ {
			var got string
			if got, err = receiver(i); got == "s0" && !skip(i) {
				found = i
			}
		}
	})
	require.NoError(t, err)
	require.NotEqual(t, -1, found, "no first peer of %d made s0 win: the kernel never finds a reconnected socket in its old slot", tries)
	t.Logf("s0 won after %d tries, with first peer %v", found+1, first(found))
	other := found + 1
	for skip(other) {
		other++
	}
	var again, next string
	n.th.Do(func() {
		if again, err = receiver(found); err == nil {
			next, err = receiver(other)
		}
		syscall.Close(s1)
	})
	require.NoError(t, err)
	require.Equal(t, "s0", again, "first peer %v again", first(found))
	require.Equal(t, "s1", next, "first peer %v", first(other))

	m := newModel()
	for id, dev := range []int{n.lo, 0} { // s0 is id 1 here, s1 id 0
		require.NoError(t, m.insert(id, bindSpec{addr: local.Addr(), port: port, reuseAddr: true, dev: dev}))
		x := s1First
		if id == 1 {
			x = first(found)
		}
		require.NoError(t, m.connect(id, x, local.Addr()))
		require.NoError(t, m.connect(id, peer, local.Addr()))
	}
	require.Equal(t, []int{0}, m.lookup(peer, local, n.lo, model.Linux), "model: by score")
	require.Contains(t, m.strays(peer, local, n.lo), 1, fmt.Sprintf("model: s0 may be found in its old slot (first peer %v)", first(found)))
}

// udpSlots returns the number of slots of the UDP hash table of the calling
// thread's network namespace (negative in the file when the namespace
// shares the host's).
func udpSlots() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/udp_hash_entries")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if n < 0 {
		n = -n
	}
	return n, err
}
