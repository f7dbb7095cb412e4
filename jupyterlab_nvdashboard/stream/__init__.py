"""The broadcast data path: each tick's new rows, encoded once, written to every open page.

``frames`` is the binary format, ``downsample`` the min/max reduction for long windows, and
``broadcaster`` the per-route families, their subscribers and the ``<route>/stream``
websocket. Bokeh sessions keep the page layout and widgets; live samples never go through
them.
"""
