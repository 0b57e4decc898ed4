"""Notifications: thresholds crossed, recorded with the results that caused them, delivered later."""
