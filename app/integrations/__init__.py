"""What platforms wire into: idempotent submits, signed webhooks, sweeps over a grid, schedules."""
