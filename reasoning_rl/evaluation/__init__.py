"""Evaluation during training: the held-out table before and after (heldout), retention of other tasks
(retention) and the KL to the base model (kl_to_base)."""
