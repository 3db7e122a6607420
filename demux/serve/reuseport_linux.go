package serve

import "golang.org/x/sys/unix"

// setReusePort puts a kernel socket in its port's SO_REUSEPORT group.
func setReusePort(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
}

// setFreeBind lets a kernel socket bind an address the host does not have
// (IP_FREEBIND, which Linux reads for IPv6 sockets too).
func setFreeBind(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_FREEBIND, 1)
}
