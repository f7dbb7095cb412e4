"""The simulated NVIDIA driver: stands where ``libnvidia-ml.so.1`` stands.

Imports nothing from the rest of the project (``metrics/`` never imports it; ``server.py``
chooses the real library or this one). ``scenarios`` holds the load models a simulated GPU
can play, each written from NVIDIA's documentation.
"""
