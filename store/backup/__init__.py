"""Whole-store backup and restore, and the importer for a reference store's data directory."""
