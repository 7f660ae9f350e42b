"""What batch and serving share, below both: the ledger of final days, the version pointers, and the
merge of speed partials with batch rows."""
