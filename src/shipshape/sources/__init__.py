"""Where usage comes from: the edges that read Prometheus (PromQL over HTTP) and metrics.k8s.io into
the analyzers' one usage interface (`shipshape.analyzers.efficiency.usage.UsageData`)."""
