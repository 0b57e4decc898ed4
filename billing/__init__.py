"""Pure billing logic on Arrow arrays and Decimal: token kinds, rate cards, quota pools, invoices."""
