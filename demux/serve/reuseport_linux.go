package serve

import "golang.org/x/sys/unix"

// setReusePort puts a kernel socket in its port's SO_REUSEPORT group.
func setReusePort(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
}
