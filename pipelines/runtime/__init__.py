"""Running a step: Beam options, staged runs, start-up, logs and the test-only fault hook."""
