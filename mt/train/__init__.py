"""Training: loss, learning-rate schedule, optimizer, checkpoints and the loop."""
