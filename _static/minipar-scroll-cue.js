// minipar: a visible cue under every box of a page that scrolls sideways because what it holds
// (a figure kept legible at 480 px, an explorer's chart, an animation, a wide equation or table)
// is wider than the column, so a reader on a phone knows there is more to the right.
//
// The box gets the class "minipar-overflows" (a fade at its right edge, _static/minipar.css) and,
// right after it, a line "◂ scroll sideways for the rest ▸" (class "minipar-scroll-cue"); both go
// away when the box fits or is scrolled to its end. Checked again when the window resizes, an
// image loads, MathJax typesets or an explorer or animation redraws. No library, no network.
// tests/test_site_browser.py fails on a box that overflows without its cue.
(function () {
  "use strict";
  const BOXES = [
    "figure.minipar-figure .minipar-figure-box",
    "div.cell_output",
    ".minipar-explorer-chart",
    ".minipar-explorer-output",
    ".minipar-animation .mpa-stage",
    "div.math",
    "mjx-container",
    "article table.table",
    "article table.docutils",
  ].join(", ");
  const CUE = "◂ scroll sideways for the rest ▸";
  const SLACK = 3;  // px: an overflow this small is sub-pixel rounding (MathJax), nothing hidden

  function cueOf(box) {
    const next = box.nextElementSibling;
    return next && next.classList.contains("minipar-scroll-cue") ? next : null;
  }

  function update(box) {
    const o = getComputedStyle(box).overflowX;
    const over = (o === "auto" || o === "scroll") && box.clientWidth > 0
      && box.scrollWidth > box.clientWidth + SLACK;
    box.classList.toggle("minipar-overflows", over);
    box.classList.toggle("minipar-at-end", over && box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
    let cue = cueOf(box);
    if (over && !cue) {
      cue = document.createElement("span");  // a span: an inline equation sits in a <p>
      cue.className = "minipar-scroll-cue";
      cue.setAttribute("aria-hidden", "true");
      cue.textContent = CUE;
      box.after(cue);
    }
    if (cue) cue.hidden = !over;
  }

  let queued = false;
  function checkAll() {
    queued = false;
    document.querySelectorAll(BOXES).forEach(update);
  }
  function schedule() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(checkAll);
  }

  function start() {
    checkAll();
    window.addEventListener("resize", schedule);
    document.addEventListener("load", schedule, true);          // images, in capture
    document.addEventListener("scroll", (e) => {
      const box = e.target;
      if (box && box.classList && box.classList.contains("minipar-overflows")) update(box);
    }, true);
    new MutationObserver((records) => {
      // ignore the cues this script adds, or it would wake itself
      if (records.every((r) => [...r.addedNodes, ...r.removedNodes].every((n) => n.classList && n.classList.contains("minipar-scroll-cue")))) return;
      schedule();
    }).observe(document.body, {childList: true, subtree: true});
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
