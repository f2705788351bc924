"""Reporting over finished runs: reasoning-rl-report (report), its plots (plots) and intervals (stats)."""
