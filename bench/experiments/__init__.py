"""Measurements run to decide a design; nothing in the product imports this package."""
