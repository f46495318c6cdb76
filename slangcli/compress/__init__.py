"""k-tied compression: of a posterior's standard deviations (ktied) and of stored runs (runs)."""
