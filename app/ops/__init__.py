"""Operations: Prometheus metrics, GPU telemetry, weights manifests."""
