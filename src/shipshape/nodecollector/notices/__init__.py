"""The node-side notice poller (`shipshape node-notices`): reads this node's instance metadata (AWS
IMDSv2, GCP metadata server, Azure Scheduled Events) and publishes a termination notice or a rebalance
recommendation on its own Node (taint, condition, Event) as `contracts.notices` fixes. Parsers are
pure (`aws`, `gcp`, `azure`); `publish` plans the Node writes (pure) and makes them; `poller` runs the
rounds on an injected clock."""
