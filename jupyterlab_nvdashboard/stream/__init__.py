"""The broadcast data path: each tick's new rows, encoded once, written to every open page.

``frames`` is the binary format, ``downsample`` the min/max reduction for long windows, and
``broadcaster`` the per-route families, their subscribers and the ``<route>/stream``
websocket; ``changes`` a small JSON document sent to its sockets when its content changes
(``/glance/stream``). Bokeh sessions keep the page layout and widgets; live samples never go through
them.
"""
