#!/usr/bin/env bash
# generate.sh: regenerate the Go code of envd's services from the .proto
# files beside it (make proto). Needs protoc (Debian's protobuf-compiler)
# and the pinned plugins, installed into a cache by go install. The output
# is committed: building jailcell needs none of these tools.
set -euo pipefail
cd "$(dirname "$0")"
bin=${PROTO_TOOLS_DIR:-/var/cache/jailcell/proto-tools}
mkdir -p "$bin"
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
for svc in process filesystem; do
	PATH=$bin:$PATH protoc -I . -I /usr/include \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative \
		"$svc/$svc.proto"
done
