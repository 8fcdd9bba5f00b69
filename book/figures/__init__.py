"""Figures for the chapter pages, drawn at build time by the course's own code.

One module per chapter, ``book/figures/<slug>.py``; each figure is a function decorated with
:func:`figures.kit.figure`, which names the library functions the picture is drawn from. The
page shows it with the ``{minipar-figure}`` directive (``book/_ext/minipar_figures.py``)::

    ```{minipar-figure} collectives.ring_steps
    :alt: Four ranks, each holding four chunks; ...
    Caption: what to look at in the picture.
    ```

The build calls the function twice (light and dark theme) and writes two SVG files, so a change
in the code the figure draws changes the picture. ``tests/test_book_figures.py`` renders every
figure and fails when one no longer calls a function it says it draws.
"""
