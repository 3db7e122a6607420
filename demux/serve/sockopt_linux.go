package serve

import "syscall"

// setSockopts asks for the kernel's drop count with every datagram
// (SO_RXQ_OVFL) and for its traffic class (IP_RECVTOS, IPV6_RECVTCLASS:
// a Conn's reader sees its ECN bits), makes an IPv6 socket IPv6-only so
// that it can coexist with the IPv4 socket of the same port, and sets the
// receive buffer. It sets SO_REUSEADDR, so that the bind succeeds beside
// another program's socket on the port that has SO_REUSEADDR too (on any
// address: the kernel socket is a wildcard one); claimPort clears it once
// bound.
func setSockopts(fd int, v6 bool, rcvbuf int) error {
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1); err != nil {
		return err
	}
	if v6 {
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1); err != nil {
			return err
		}
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_RECVTCLASS, 1); err != nil {
			return err
		}
	} else if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, syscall.IP_RECVTOS, 1); err != nil {
		return err
	}
	if rcvbuf > 0 {
		// Beyond net.core.rmem_max only SO_RCVBUFFORCE (CAP_NET_ADMIN)
		// gets the size; without the capability, SO_RCVBUF's capped one.
		if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, rcvbuf) == nil {
			return nil
		}
		return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
	}
	return nil
}

// claimPort clears SO_REUSEADDR on a bound kernel socket. Linux reads an
// earlier socket's SO_REUSEADDR when a later one binds, so from then on
// no socket binds the port on an address that the wildcard kernel socket
// covers: not another server's kernel socket, which would take the
// port's datagrams from this one, nor another program's. (A socket with
// SO_REUSEADDR that binds between the bind and the clear binds beside it.)
func claimPort(fd int) error {
	return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 0)
}

// oobSpace is the room for the SO_RXQ_OVFL and traffic class control
// messages.
var oobSpace = 2 * syscall.CmsgSpace(4)

const (
	msgTrunc  = syscall.MSG_TRUNC
	msgCtrunc = syscall.MSG_CTRUNC
)
