# syntax=docker/dockerfile:1
# RouteBalance: one static binary (pure Go, no cgo — SQLite is modernc.org)
# on distroless/static, running as the image's nonroot user (65532).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The dashboard, migrations and defaults are embedded with go:embed.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/routebalance ./cmd/routebalance \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/routebalance /usr/local/bin/routebalance
# An empty data dir owned by nonroot, so the first run can create the
# SQLite file and the generated secrets (mode 0600) in it.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV ROUTEBALANCE_ADDR=0.0.0.0:8080 \
    ROUTEBALANCE_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8080
# distroless has no shell or curl: the binary probes itself.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/routebalance", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/routebalance"]
CMD ["serve"]
