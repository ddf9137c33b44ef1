#!/usr/bin/env bash
# Regenerates the kvagent connector's Go code from its .proto. The generated
# files are committed; run this only after editing the .proto.
# Needs protoc (Debian: protobuf-compiler) and the two Go plugins pinned
# below (protoc-gen-go-grpc v1.6.1 emits code for grpc >= 1.64; go.mod has
# v1.85.0).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null; then
	echo "gen-proto: protoc missing; installing protobuf-compiler" >&2
	apt-get install -y protobuf-compiler
fi
GOBIN="$(go env GOPATH)/bin"
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.1
export PATH="$GOBIN:$PATH"

protoc -I kvagent/connector/connectorpb \
	--go_out=kvagent/connector/connectorpb --go_opt=paths=source_relative \
	--go-grpc_out=kvagent/connector/connectorpb --go-grpc_opt=paths=source_relative \
	kvagent/connector/connectorpb/connector.proto
echo "gen-proto: kvagent/connector/connectorpb regenerated" >&2
