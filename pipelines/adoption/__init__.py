"""Adoption: weekly metrics, the decline detector, simulation, retirement reports and their pages."""
