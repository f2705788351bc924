"""The run folder: its lock (lock), crash-safe writes (atomic), checkpoints (checkpoint), status.json
(status), metrics.jsonl (metrics_log) and the log file (log)."""
