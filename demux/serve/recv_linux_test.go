package serve

import (
	"net/netip"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestSockaddrAddrPort: the reader's own reading of the sender's address,
// which replaces x/net's, for both families, a scoped IPv6 address and a
// family it does not know.
func TestSockaddrAddrPort(t *testing.T) {
	v4 := func(a string, port uint16) syscall.RawSockaddrInet6 {
		var sa syscall.RawSockaddrInet6
		s4 := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&sa))
		s4.Family, s4.Addr = syscall.AF_INET, netip.MustParseAddr(a).As4()
		*(*[2]byte)(unsafe.Pointer(&s4.Port)) = [2]byte{byte(port >> 8), byte(port)}
		return sa
	}
	v6 := func(a string, port uint16, scope uint32) syscall.RawSockaddrInet6 {
		sa := syscall.RawSockaddrInet6{Family: syscall.AF_INET6, Addr: netip.MustParseAddr(a).As16(), Scope_id: scope}
		*(*[2]byte)(unsafe.Pointer(&sa.Port)) = [2]byte{byte(port >> 8), byte(port)}
		return sa
	}
	for _, tc := range []struct {
		sa   syscall.RawSockaddrInet6
		want string
	}{
		{v4("127.0.0.9", 5353), "127.0.0.9:5353"},
		{v4("10.1.2.3", 1), "10.1.2.3:1"},
		{v6("::1", 443, 0), "[::1]:443"},
		{v6("fe80::1", 65535, 7), "[fe80::1%7]:65535"},
		{v6("::ffff:127.0.0.1", 80, 0), "[::ffff:127.0.0.1]:80"},
		{syscall.RawSockaddrInet6{Family: syscall.AF_UNIX}, "invalid AddrPort"},
	} {
		assert.Equal(t, tc.want, sockaddrAddrPort(&tc.sa).String())
	}
}
