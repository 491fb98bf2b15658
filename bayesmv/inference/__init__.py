"""Samplers and their step methods."""
