# rollgate controller and CLI image.
#
# UNTESTED: this file was written on a machine that cannot run docker, so it
# has never been built by the project. The same build command
# (CGO_ENABLED=0 go build ./cmd/rollgate) is known to produce a static
# binary. See docs/install.md.
#
#   docker build -t registry.example.com/rollgate:dev .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags="-s -w" -o /out/rollgate ./cmd/rollgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rollgate /rollgate
USER 65532:65532
ENTRYPOINT ["/rollgate"]
