package serve_test

import (
	"net"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// setRecvTOS makes a client socket report each datagram's IP_TOS.
func setRecvTOS(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_RECVTOS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// findTOS returns the IP_TOS control message's byte in oob.
func findTOS(t *testing.T, oob []byte) (byte, bool) {
	ms, err := syscall.ParseSocketControlMessage(oob)
	require.NoError(t, err)
	for _, m := range ms {
		if m.Header.Level == syscall.IPPROTO_IP && m.Header.Type == syscall.IP_TOS && len(m.Data) >= 1 {
			return m.Data[0], true
		}
	}
	return 0, false
}

// tosMsg is an IP_TOS control message for sending, with an int.
func tosMsg(tos int32) []byte {
	b := make([]byte, syscall.CmsgSpace(4))
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = syscall.IPPROTO_IP, syscall.IP_TOS
	h.SetLen(syscall.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[syscall.CmsgLen(0)])) = tos
	return b
}

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }
