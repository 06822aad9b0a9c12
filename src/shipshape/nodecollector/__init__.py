"""The node-side collector: parses the host's boot logs (syslog, journald, container logs) into the
node start-up timeline and publishes it (node annotation, Prometheus). Parsers are pure; `collect`
and `publish` do the I/O."""
