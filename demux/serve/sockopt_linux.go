package serve

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setSockopts asks for the kernel's drop count with every datagram
// (SO_RXQ_OVFL) and for its traffic class (IP_RECVTOS, IPV6_RECVTCLASS:
// a Conn's reader sees its ECN bits), makes an IPv6 socket IPv6-only so
// that it can coexist with the IPv4 socket of the same port, and sets the
// receive buffer. It sets SO_REUSEADDR, so that the bind succeeds beside
// another program's socket on the port that has SO_REUSEADDR too (on any
// address: the kernel socket is a wildcard one); claimPort clears it once
// bound.
func setSockopts(fd int, v6 bool, rcvbuf int) error {
	// The options set to 1, as level and option, in this order.
	on := [][2]int{{syscall.SOL_SOCKET, syscall.SO_REUSEADDR}, {syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL}}
	if v6 {
		on = append(on, [2]int{syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY}, [2]int{syscall.IPPROTO_IPV6, syscall.IPV6_RECVTCLASS})
	} else {
		on = append(on, [2]int{syscall.IPPROTO_IP, syscall.IP_RECVTOS})
	}
	for _, o := range on {
		if err := syscall.SetsockoptInt(fd, o[0], o[1], 1); err != nil {
			return err
		}
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

// setReusePort puts a kernel socket in its port's SO_REUSEPORT group.
func setReusePort(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
}

// setFreeBind lets a kernel socket bind an address the host does not have
// (IP_FREEBIND, which Linux reads for IPv6 sockets too).
func setFreeBind(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_FREEBIND, 1)
}

// netOff is SKF_NET_OFF: a classic BPF load at netOff+k reads byte k of
// the network header, wherever the packet's data begins.
const netOff = -0x100000

// steerFlows attaches to the SO_REUSEPORT group of fd, a kernel socket of
// family v6 among n readers, a program that picks the group's socket by
// a hash of the datagram's source and destination addresses and ports.
//
// Without it, the kernel hashes the address that its lookup matched,
// which for a wildcard kernel socket is the wildcard, not the datagram's
// destination: one peer's datagrams to every address of the port, from
// one source port, would all reach one reader. The program reads the
// headers through SKF_NET_OFF; IPv6 extension headers, which it does not
// walk, only move the bytes it takes for the ports, so that one flow
// still maps to one reader. Datagrams keep to one reader per flow, as
// before, and the kernel falls back to its own hash when the program
// returns an index beyond the group's size, as it may while a reader
// opens or closes.
func steerFlows(fd int, v6 bool, n int) error {
	at := func(k int32) uint32 { return uint32(netOff + k) }
	ld := func(k int32) unix.SockFilter { // A = the 32-bit word at the network header's byte k
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: at(k)}
	}
	tax := unix.SockFilter{Code: unix.BPF_MISC | unix.BPF_TAX}
	xor := unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_XOR | unix.BPF_X}
	var prog []unix.SockFilter
	if v6 {
		// The ports follow the fixed header; the addresses are the words
		// at 8 to 36.
		prog = append(prog, ld(40))
		for k := int32(8); k < 40; k += 4 {
			prog = append(prog, tax, ld(k), xor)
		}
	} else {
		prog = append(prog,
			// X = the header's length, from its first byte; A = the ports.
			unix.SockFilter{Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: at(0)},
			unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_IND, K: at(0)},
			tax, ld(12), xor, tax, ld(16), xor)
	}
	prog = append(prog,
		// A multiplicative hash. Bit k of a product depends only on bits
		// 0 to k of the word multiplied, so the high half is first folded
		// into the low one, and the index taken from the product's high
		// half: each bit of it then depends on every bit of the words.
		tax,
		unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K, K: 16},
		xor,
		unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_MUL | unix.BPF_K, K: 0x9e3779b1},
		unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K, K: 16},
		unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_A},
	)
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// oobSpace is the room for the SO_RXQ_OVFL and traffic class control
// messages.
var oobSpace = 2 * syscall.CmsgSpace(4)

const (
	msgTrunc  = syscall.MSG_TRUNC
	msgCtrunc = syscall.MSG_CTRUNC
)
