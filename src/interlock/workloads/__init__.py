"""Work made of many runs: batches (one run per row of a dataset) and experiments (variants
of a workflow over the same rows). A layer above the public API: it creates and watches runs
through `interlock.api.Interlock`, and keeps its own records in the store."""
