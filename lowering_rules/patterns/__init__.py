"""Patterns of several equations lowered whole: fusions, joins, grouped-query attention, RoPE,
half-float scans, power spectra and the DFT matrices they read."""
