// Package services runs software that nobody in this project wrote,
// quic-go and miekg/dns, on any net.PacketConn, and drives it with clients
// of the same software: the interoperability tests of this module and the
// benchmark runner (bench/cmd/udpbench) run the same servers on a kernel
// *net.UDPConn and on a demux/serve Conn.
package services

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
)

// TLSConfigs returns a server config with a fresh self-signed certificate
// for "localhost" and a client config that trusts it, both for the ALPN
// protocol "echo".
func TLSConfigs() (server, client *tls.Config, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "udpdemux interop"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"echo"}},
		&tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"echo"}}, nil
}

// QUICEchoServer accepts connections on ln and echoes every stream, until
// ln closes or ctx ends.
func QUICEchoServer(ctx context.Context, ln *quic.Listener) {
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		go func() {
			for {
				st, err := conn.AcceptStream(ctx)
				if err != nil {
					return
				}
				go func() {
					_, _ = io.Copy(st, st)
					_ = st.Close()
				}()
			}
		}()
	}
}

// QUICEchoClient is a quic-go client connection to an echo server.
type QUICEchoClient struct {
	udp  *net.UDPConn
	tr   *quic.Transport
	conn *quic.Conn
}

// DialQUICEcho connects from a kernel socket of its own on local (port 0
// for any) to the echo server at addr.
func DialQUICEcho(ctx context.Context, local netip.Addr, addr netip.AddrPort, clientTLS *tls.Config) (*QUICEchoClient, error) {
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return nil, err
	}
	c := &QUICEchoClient{udp: udp, tr: &quic.Transport{Conn: udp}}
	if c.conn, err = c.tr.Dial(ctx, net.UDPAddrFromAddrPort(addr), clientTLS, &quic.Config{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	return c, nil
}

// Echo sends data on a new stream and checks that the same bytes come
// back.
func (c *QUICEchoClient) Echo(ctx context.Context, data []byte) error {
	st, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() {
		_, err := st.Write(data)
		werr <- errors.Join(err, st.Close())
	}()
	got, err := io.ReadAll(st)
	if err := errors.Join(err, <-werr); err != nil {
		return err
	}
	if !bytes.Equal(data, got) {
		return fmt.Errorf("the echo differs: %d bytes back of %d", len(got), len(data))
	}
	return nil
}

// Close closes the connection and its socket.
func (c *QUICEchoClient) Close() {
	if c.conn != nil {
		_ = c.conn.CloseWithError(0, "done")
	}
	_ = c.tr.Close()
	_ = c.udp.Close()
}

// DNSAnswerer answers every TXT question with name, so that a client can
// tell which server answered.
func DNSAnswerer(name string) dns.HandlerFunc {
	return func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = append(m.Answer, &dns.TXT{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60},
			Txt: []string{name},
		})
		_ = w.WriteMsg(m)
	}
}

// Answers reports whether r is DNSAnswerer(name)'s answer.
func Answers(r *dns.Msg, name string) bool {
	if len(r.Answer) != 1 {
		return false
	}
	txt, ok := r.Answer[0].(*dns.TXT)
	return ok && len(txt.Txt) == 1 && txt.Txt[0] == name
}

// ServeDNS starts a miekg/dns server on pc that answers with name, and
// returns once it serves.
func ServeDNS(ctx context.Context, pc net.PacketConn, name string) (*dns.Server, error) {
	started := make(chan struct{})
	ds := &dns.Server{PacketConn: pc, Handler: DNSAnswerer(name), NotifyStartedFunc: func() { close(started) }}
	failed := make(chan error, 1)
	go func() { failed <- ds.ActivateAndServe() }()
	select {
	case <-started:
		return ds, nil
	case err := <-failed:
		return nil, fmt.Errorf("dns server: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// DNSTarget is a server that DNSLoad queries, and the name it answers.
type DNSTarget struct {
	Addr netip.AddrPort
	Name string
}

// DNSLoad is what DNSLoad measured.
type DNSLoad struct {
	Queries int           // answered queries
	Wrong   int           // answers with another server's name
	Elapsed time.Duration // from the first query to the last answer
}

// Rate returns the answered queries per second.
func (l DNSLoad) Rate() float64 { return float64(l.Queries) / l.Elapsed.Seconds() }

// DNSLoadFor runs clients miekg/dns clients for d, each on a connected
// socket of its own that asks its target (targets in turn) one query at a
// time, and counts the answers and those that name another server. A
// query unanswered within timeout fails the run.
func DNSLoadFor(ctx context.Context, targets []DNSTarget, clients int, d, timeout time.Duration) (DNSLoad, error) {
	var queries, wrong atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	stop := time.Now().Add(d)
	start := time.Now()
	for i := range clients {
		tg := targets[i%len(targets)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(tg.Addr))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			co := &dns.Conn{Conn: c}
			q := new(dns.Msg)
			q.SetQuestion("who.example.", dns.TypeTXT)
			for time.Now().Before(stop) && ctx.Err() == nil {
				_ = c.SetDeadline(time.Now().Add(timeout))
				if err := co.WriteMsg(q); err != nil {
					errs <- err
					return
				}
				r, err := co.ReadMsg()
				if err != nil {
					errs <- fmt.Errorf("query to %v: %w", tg.Addr, err)
					return
				}
				queries.Add(1)
				if !Answers(r, tg.Name) {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	load := DNSLoad{Queries: int(queries.Load()), Wrong: int(wrong.Load()), Elapsed: time.Since(start)}
	return load, errors.Join(<-errs, ctx.Err())
}
