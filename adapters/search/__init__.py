"""Offline knowledge for the search environments: packaged corpora, reference facts, search indexes."""
