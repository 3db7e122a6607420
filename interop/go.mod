module github.com/udpdemux/udpdemux/interop

go 1.26.0

require (
	github.com/miekg/dns v1.1.73
	github.com/quic-go/quic-go v0.65.0
	github.com/stretchr/testify v1.12.1
	github.com/udpdemux/udpdemux v0.0.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/udpdemux/udpdemux => ../
