"""Metrics (Prometheus) and traces (OpenTelemetry) of every function (R-17.1).

`metrics`: the metric families, in the process's default registry, served at `/metrics` by the
HTTP functions and on the workers' metrics port. `tracing`: W3C trace context from HTTP
requests through CloudEvents (`traceparent`, `correlationid`) to every worker; spans are
exported over OTLP only when the standard `OTEL_*` variables ask for it.
"""
