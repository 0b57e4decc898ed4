"""invoices: drafts, finalization, voids and adjustments (documents), and their export."""
