// NATS server, which `scripts/services start` builds and starts three of,
// clustered with JetStream, for lease/natslease: a module of its own, so
// that the library's go.mod gains none of the server's dependencies.
// v2.15.3 is the pinned version (per-key TTLs need 2.11 or newer); another
// is chosen with go get -tool github.com/nats-io/nats-server/v2@VERSION here.
module github.com/aegislab/aegis/tools/nats

go 1.26.0

tool github.com/nats-io/nats-server/v2

require (
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nats-server/v2 v2.15.3 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
