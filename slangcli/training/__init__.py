"""A fit: its options declared once, its plan, the training loop, checkpoints, restarts, tuning and learned precisions,
and the fit of prepared data from a plan to a run."""
