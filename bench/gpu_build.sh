#!/usr/bin/env bash
# gpu_build.sh: builds, on a machine with Go, the binaries bench/gpu_check.sh
# runs on a GPU machine without Go; carry bin/ there (the device tool's
# carry: ["bin"], 64 MiB at most, hence -s -w) and run
# `bash bench/gpu_check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
export CGO_ENABLED=0
go build -ldflags="-s -w" -o bin/cohort ./cmd/cohort
go build -ldflags="-s -w" -o bin/gpt ./examples/gpt
cp "$(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt" bin/opticks.txt
for p in cuda nvrtc cublas alloc cudatensor nccl; do
	go test -c -ldflags="-s -w" -o "bin/$p.test" "./device/$p"
done
go test -c -ldflags="-s -w" -o bin/ncclbackend.test ./distributed/backend/nccl
du -sh bin
