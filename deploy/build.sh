#!/bin/sh
# The release build of iac-code: one static binary (no cgo, so no libc to
# match at run time), reproducible paths, no symbol tables. The image
# (deploy/Dockerfile), `task build:static` and CI all run this file, so
# they ship the same flags.
#   deploy/build.sh OUT [VERSION]
set -eu
out=${1:?usage: deploy/build.sh OUT [VERSION]}
version=${2:-${IAC_CODE_VERSION:-0.1.0-dev}}
CGO_ENABLED=0 exec go build -trimpath -ldflags "-s -w -X main.version=${version}" -o "$out" ./cmd/iac-code
