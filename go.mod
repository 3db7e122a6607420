module github.com/udpdemux/udpdemux

go 1.26

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
)
