"""The serving simulator's parts; the public entry point is :mod:`core.serving.simulation`."""
