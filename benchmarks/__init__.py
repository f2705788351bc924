"""Evaluation harness (accuracy, pass@k, maj@k of checkpoints) and performance benchmarks."""
