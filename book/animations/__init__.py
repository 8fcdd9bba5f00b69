"""Step-through animations for the chapter pages, driven by data the course's code exports.

One module per animation, ``book/animations/<name>.py``, whose function (decorated with
:func:`animations.kit.animation`) returns ``(data, frames)``: ``data`` is the raw plan the page
inlines as JSON (the ring's per-step chunk indices, a schedule's simulated timeline, the ring
attention's per-step blocks and block softmax statistics), ``frames`` what Python says every step
shows. The page's player (``player.js``, no library, no network) recomputes the frames from
``data`` alone; ``tests/test_book_animations.py`` runs it under Node.js and compares them with
``frames``. The page shows an animation with the ``{minipar-animation}`` directive
(``book/_ext/minipar_animations.py``)::

    ```{minipar-animation} ring_all_reduce
    :alt: what the animation shows, for a reader who cannot see it
    Caption: what to watch.
    ```
"""
