"""Importers and exporters, one module per format (added by the format issues)."""
