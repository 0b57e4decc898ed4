"""The warehouse: engines and the schema check, bulk loads, locks, accounts and the lake it is bound to."""
