"""Performance benchmarks: scripts that measure and print figures, side by side with anchors."""
