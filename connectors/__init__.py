"""Connections to systems outside RA-BIT (off unless the user asks): each with hard timeouts and clear errors."""
