"""quota meter: the Beam pipeline, stored balances, re-metering, show and explain."""
