"""The spot/on-demand placement controller: webhook mutators, pure placement decisions, loops."""
