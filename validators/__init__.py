"""Parity checks between PyTorch and every target."""
