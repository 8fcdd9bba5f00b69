// minipar step-through animations: one player for every animation on the book's pages.
//
// No library, no network. The page inlines each animation's data (exported by
// book/animations/<name>.py from the course's code) as JSON next to a <div class="minipar-animation">;
// this script recomputes every step's state from that raw data (frames(data)), then draws it with
// Back / Step / Play buttons (keyboard: ← → step and space plays once the player has the focus;
// clicking any of its buttons keeps the focus in it). A drawing wider than the player scrolls
// inside it (the site's scroll cue marks it); the pipeline's timeline scales to the width first.
// tests/test_book_animations.py runs frames(data) under Node.js and compares it with the frames
// Python computes, so the page shows what the code does.
(function (root) {
  "use strict";

  // ---- step logic (pure; what the parity test checks) ------------------------------------

  // Ring all-reduce: held[r][c] = sorted ranks summed into chunk c on rank r, after each step.
  // Every rank sends at once; reduce-scatter adds the incoming chunk, all-gather replaces it.
  function ringFrames(d) {
    const n = d.n;
    let held = [];
    for (let r = 0; r < n; r++) held.push(Array.from({length: n}, () => [r]));
    const copy = (h) => h.map((row) => row.map((c) => c.slice()));
    const out = [{phase: "start", k: -1, held: copy(held)}];
    for (const st of d.steps) {
      const sent = held.map((row, r) => row[st.send[r]]);
      const next = copy(held);
      for (let r = 0; r < n; r++) {
        const incoming = sent[(r - 1 + n) % n];
        const c = st.recv[r];
        next[r][c] = st.phase === "reduce-scatter"
          ? Array.from(new Set(held[r][c].concat(incoming))).sort((a, b) => a - b)
          : incoming.slice();
      }
      held = next;
      out.push({phase: st.phase, k: st.k, held: copy(held)});
    }
    return out;
  }

  // Pipeline: at every time an action starts or ends, each rank's running action (or null)
  // and the micro-batches whose activations it holds (from a forward's start to its backward's end).
  function pipelineVariantFrames(v, p) {
    const times = Array.from(new Set(v.timeline.flatMap((e) => [e[4], e[5]]))).sort((a, b) => a - b);
    return times.map((t) => {
      const busy = new Array(p).fill(null), held = new Array(p).fill(0);
      for (const [r, op, stage, mb, t0, t1] of v.timeline) {
        if (t0 <= t && t < t1) busy[r] = `${op}${stage}.${mb}`;
        if (op === "F" && t0 <= t) held[r] += 1;
        if (op === "B" && t1 <= t) held[r] -= 1;
      }
      return {t, busy, held};
    });
  }

  function pipelineFrames(d) {
    const out = {};
    for (const v of d.variants) out[v.name] = pipelineVariantFrames(v, d.p);
    return out;
  }

  // Ring attention: each rank merges the block statistics (m, l, o) of every chunk pair it
  // computes for its tracked query into its running state: m' = max(m, m_b),
  // l' = l e^{m−m'} + l_b e^{m_b−m'}, o' = (l e^{m−m'} o + l_b e^{m_b−m'} o_b) / l',
  // lse = m' + log l' (online softmax). One list of frames per layout (zigzag, contiguous).
  function ringAttentionVariantFrames(v, cp) {
    const state = new Array(cp).fill(null);
    return v.steps.map((row, i) => {
      const f = {step: i, src: [], pairs: [], m: [], l: [], lse: [], o: []};
      row.forEach((cell, r) => {
        for (const b of cell.blocks) {
          const s = state[r];
          if (s === null) {
            state[r] = {m: b.m, l: b.l, o: b.o.slice()};
          } else {
            const m = Math.max(s.m, b.m);
            const wa = s.l * Math.exp(s.m - m), wb = b.l * Math.exp(b.m - m);
            const l = wa + wb;
            state[r] = {m, l, o: s.o.map((x, j) => (wa * x + wb * b.o[j]) / l)};
          }
        }
        f.src.push(cell.src);
        f.pairs.push(cell.pairs.map((p) => p.slice()));
        const s = state[r];
        f.m.push(s ? s.m : null);
        f.l.push(s ? s.l : null);
        f.lse.push(s ? s.m + Math.log(s.l) : null);
        f.o.push(s ? s.o.slice() : null);
      });
      return f;
    });
  }

  function ringAttentionFrames(d) {
    const out = {};
    for (const v of d.variants) out[v.name] = ringAttentionVariantFrames(v, d.cp);
    return out;
  }

  const STEP_LOGIC = {ring: ringFrames, pipeline: pipelineFrames, ring_attention: ringAttentionFrames};

  function frames(data) {
    const logic = STEP_LOGIC[data.kind];
    if (!logic) throw new Error(`animation kind (${data.kind}) must be one of ${Object.keys(STEP_LOGIC).join(", ")}`);
    return logic(data);
  }

  // ---- drawing ---------------------------------------------------------------------------

  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const num = (x, k) => (x === null ? "–" : x.toFixed(k === undefined ? 3 : k));

  function drawRing(d, fr, i) {
    const f = fr[i], n = d.n, st = i > 0 ? d.steps[i - 1] : null;
    let h = '<table class="mpa-grid"><thead><tr><th scope="col"></th>';
    for (let c = 0; c < n; c++) h += `<th scope="col">chunk ${c}</th>`;
    h += "</tr></thead><tbody>";
    for (let r = 0; r < n; r++) {
      h += `<tr><th scope="row">rank ${r}</th>`;
      for (let c = 0; c < n; c++) {
        const who = f.held[r][c];
        const cls = [`mpa-level-${Math.min(who.length, 4)}`];
        if (st && st.recv[r] === c) cls.push("mpa-in");
        if (st && st.send[r] === c) cls.push("mpa-out");
        const text = who.length === n ? `Σ (${who.join("+")})` : who.join("+");
        h += `<td class="${cls.join(" ")}">${esc(text)}</td>`;
      }
      h += "</tr>";
    }
    h += "</tbody></table>";
    let say;
    if (!st) say = `Start: every rank holds its own values in all ${n} chunks (a cell lists the ranks summed into it).`;
    else {
      const moves = st.send.map((c, r) => `${r}→${(r + 1) % n}: chunk ${c}`).join("; ");
      say = `Step ${i} of ${d.steps.length} (${st.phase} ${st.k + 1} of ${n - 1}): every rank sends one chunk to its right neighbour (${moves}) `
        + (st.phase === "reduce-scatter" ? "and adds the chunk it receives to its own." : "and stores the summed chunk it receives.");
      if (st.phase === "reduce-scatter" && st.k === n - 2) say += " Each rank now holds one fully summed chunk (Σ): the reduce-scatter is done.";
      if (st.phase === "all-gather" && st.k === n - 2) say += " Every rank now holds every summed chunk.";
    }
    return {html: h, say};
  }

  const OP_CLASS = {F: "mpa-f", B: "mpa-b", W: "mpa-w"};
  // Pipeline geometry: the label column and the pixels per time unit, chosen so the timeline
  // fits the width the player has (`avail`, px; 0 when unknown), between MIN_UNIT and MAX_UNIT.
  const PIPE_LABEL = 64, MIN_UNIT = 7, MAX_UNIT = 20;

  function pipeUnit(makespan, avail) {
    if (!(avail > 0)) return MAX_UNIT;
    return Math.max(MIN_UNIT, Math.min(MAX_UNIT, Math.floor((avail - PIPE_LABEL - 4) / makespan)));
  }

  function drawPipeline(d, fr, i, variant, avail) {
    const v = d.variants.find((x) => x.name === variant) || d.variants[0];
    const f = fr[v.name][i];
    const unit = pipeUnit(v.makespan, avail), rowH = 26;
    const width = Math.ceil(v.makespan * unit);
    let h = `<div class="mpa-pipe" style="width:${width + PIPE_LABEL}px">`;
    for (let r = 0; r < d.p; r++) {
      h += `<div class="mpa-pipe-row"><span class="mpa-pipe-label" style="flex-basis:${PIPE_LABEL}px">rank ${r}<br><small>holds ${f.held[r]}</small></span>`
        + `<span class="mpa-pipe-track" style="width:${width}px;height:${rowH}px">`;
      for (const [rr, op, stage, mb, t0, t1] of v.timeline) {
        if (rr !== r) continue;
        const state = t1 <= f.t ? "mpa-done" : t0 <= f.t ? "mpa-now" : "mpa-later";
        const chunk = Math.floor(stage / d.p);
        h += `<span class="mpa-box ${OP_CLASS[op]} ${state}${chunk ? " mpa-chunk2" : ""}" style="left:${t0 * unit}px;width:${(t1 - t0) * unit}px"`
          + ` title="${op} stage ${stage} micro-batch ${mb + 1}">${mb + 1}</span>`;
      }
      h += `<span class="mpa-cursor" style="left:${f.t * unit}px"></span></span></div>`;
    }
    h += "</div>";
    const running = f.busy.map((b, r) => (b ? `rank ${r} ${b.replace(/^(\w)(\d+)\.(\d+)$/, (_, op, s, mb) => `${op} of stage ${s}, micro-batch ${Number(mb) + 1}`)}` : `rank ${r} idle`)).join("; ");
    const say = `${v.label}: t = ${num(f.t, 1)} of ${num(v.makespan, 1)} (bubble ${(100 * v.bubble).toFixed(0)} % of the step). ${running}.`;
    return {html: h, say, cursor: PIPE_LABEL + f.t * unit};
  }

  // A rank's work against one K/V block: its chunk pairs by kind ("2 full", "diag. + full").
  function pairsText(pairs) {
    if (!pairs.length) return "skip";
    const diag = pairs.filter((p) => p[2] === "causal").length, full = pairs.length - diag;
    const part = (k, word) => (k === 0 ? [] : [k === 1 && pairs.length === 1 ? word : `${k} ${word}`]);
    return [...part(diag, "diag."), ...part(full, "full")].join("<br>");
  }

  function drawRingAttention(d, fr, i, variant) {
    const v = d.variants.find((x) => x.name === variant) || d.variants[0];
    const frames = fr[v.name], f = frames[i], cp = d.cp;
    let a = '<table class="mpa-grid"><caption>chunk pairs computed</caption><thead><tr><th scope="col">queries of</th>';
    for (let c = 0; c < cp; c++) a += `<th scope="col">K/V ${c}</th>`;
    a += "</tr></thead><tbody>";
    for (let r = 0; r < cp; r++) {
      a += `<tr><th scope="row">rank ${r}</th>`;
      for (let c = 0; c < cp; c++) {
        let text = "", cls = "mpa-level-0", tip = "";
        for (let s = 0; s <= i; s++) {
          if (frames[s].src[r] !== c) continue;
          const pairs = frames[s].pairs[r];
          text = pairsText(pairs);
          tip = pairs.map(([q, k, m]) => `query chunk ${q} × key chunk ${k} (${m === "causal" ? "diagonal" : m})`).join("; ");
          cls = pairs.length ? "mpa-level-2" : "mpa-skip";
          if (s === i) cls += " mpa-in";
        }
        a += `<td class="${cls}"${tip ? ` title="${esc(tip)}"` : ""}>${text}</td>`;
      }
      a += "</tr>";
    }
    a += "</tbody></table>";
    let b = '<table class="mpa-grid mpa-merge"><caption>running state of the rank\'s last query</caption><thead><tr><th scope="col"></th>'
      + '<th scope="col">m</th><th scope="col">ℓ</th><th scope="col">lse</th><th scope="col">o</th></tr></thead><tbody>';
    for (let r = 0; r < cp; r++) {
      b += `<tr><th scope="row">rank ${r}</th><td>${num(f.m[r])}</td><td>${num(f.l[r])}</td><td>${num(f.lse[r])}</td>`
        + `<td>${f.o[r] ? "(" + f.o[r].map((x) => num(x)).join(", ") + ")" : "–"}</td></tr>`;
    }
    b += "</tbody></table>";
    const holds = f.src.map((s, r) => `rank ${r} holds rank ${s}'s`).join(", ");
    const work = f.pairs.map((p) => p.reduce((w, q) => w + (q[2] === "causal" ? 0.5 : 1), 0));
    const even = work.every((w) => w === work[0]);
    const layout = v.name === "zigzag"
      ? `Zigzag: rank r holds chunks r and ${2 * cp - 1}−r, so every rank computes ${even ? `the same work, ${work[0]} full chunk pairs' worth (a diagonal pair is half),` : "its share"} at this step. `
      : `Contiguous: rank r holds chunk r; a block after the rank's own is skipped under the causal mask, so the ranks' work this step is ${work.join(", ")} pairs (a diagonal is half). `;
    const say = `Step ${i + 1} of ${frames.length}: ${holds} K/V block (outlined). ${layout}`
      + "Each computed pair's max and sum merge into the rank's running m, ℓ (sum of e^(z−m)), lse = m + log ℓ and output o for its last query"
      + (i === frames.length - 1 ? ", which now equal one process's attention." : ".");
    return {html: `<div class="mpa-tables">${a}${b}</div>`, say};
  }

  const DRAW = {ring: drawRing, pipeline: drawPipeline, ring_attention: drawRingAttention};
  const VARIANT_LABEL = {pipeline: "schedule", ring_attention: "layout"};

  function count(d, fr, variant) {
    return variant ? fr[variant].length : fr.length;
  }

  // The counter above the stage, 1-based like the narration: "Step 2 of 4"; the ring's first
  // frame is its start, before step 1; a schedule's frames are the moments an action starts or ends.
  function position(d, i, n) {
    if (d.kind === "ring") return i === 0 ? `Start (then ${n - 1} steps)` : `Step ${i} of ${n - 1}`;
    if (d.kind === "pipeline") return `Moment ${i + 1} of ${n}`;
    return `Step ${i + 1} of ${n}`;
  }

  function mount(el) {
    if (el.dataset.mounted) return;
    const src = el.querySelector("script.minipar-animation-data");
    if (!src) return;
    const d = JSON.parse(src.textContent);
    const fr = frames(d);
    const doc = el.ownerDocument;
    el.dataset.mounted = "1";
    let i = 0, timer = null, pointer = false;
    let variant = d.variants ? d.variants[0].name : null;
    const bar = doc.createElement("div");
    bar.className = "mpa-controls";
    const mk = (label, aria) => {
      const b = doc.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.setAttribute("aria-label", aria);
      bar.append(b);
      return b;
    };
    if (variant) {
      const lab = doc.createElement("label");
      lab.textContent = `${VARIANT_LABEL[d.kind] || "variant"} `;
      const sel = doc.createElement("select");
      for (const v of d.variants) {
        const o = doc.createElement("option");
        o.value = v.name;
        o.textContent = v.label;
        sel.append(o);
      }
      sel.addEventListener("change", () => {
        variant = sel.value;
        stop();
        i = 0;
        show();
        if (pointer) el.focus({preventScroll: true});   // chosen with the mouse: keys step again
      });
      lab.append(sel);
      bar.append(lab);
    }
    const back = mk("◀ Back", "back one step");
    const step = mk("Step ▶", "forward one step");
    const play = mk("Play", "play");
    const pos = doc.createElement("span");
    pos.className = "mpa-pos";
    pos.setAttribute("aria-live", "off");
    bar.append(pos);
    const stage = doc.createElement("div");
    stage.className = "mpa-stage";
    const say = doc.createElement("p");
    say.className = "mpa-say";
    say.setAttribute("aria-live", "polite");
    const show = () => {
      const n = count(d, fr, variant);
      i = Math.max(0, Math.min(i, n - 1));
      const out = DRAW[d.kind](d, fr, i, variant, stage.clientWidth);
      stage.innerHTML = out.html;
      say.textContent = out.say;
      pos.textContent = position(d, i, n);
      back.disabled = i === 0;
      step.disabled = i === n - 1;
      el.dataset.step = String(i);
      // a timeline wider than the stage scrolls with the cursor, so it never leaves the view
      if (out.cursor !== undefined && stage.scrollWidth > stage.clientWidth) {
        stage.scrollLeft = Math.max(0, out.cursor - stage.clientWidth / 2);
      }
    };
    const stop = () => { if (timer) { clearInterval(timer); timer = null; } play.textContent = "Play"; play.setAttribute("aria-label", "play"); };
    const go = (k) => { i += k; show(); };
    // The player keeps the keyboard: a button that a click disables (Back at the start, Step at
    // the end) would drop the focus to the page, so the focus moves to the player's box.
    const keep = (b) => { if (b.disabled || pointer) el.focus({preventScroll: true}); };
    back.addEventListener("click", () => { stop(); go(-1); keep(back); });
    step.addEventListener("click", () => { stop(); go(1); keep(step); });
    play.addEventListener("click", () => {
      if (timer) { stop(); keep(play); return; }
      if (i >= count(d, fr, variant) - 1) i = -1;
      play.textContent = "Pause";
      play.setAttribute("aria-label", "pause");
      go(1);
      keep(play);
      timer = setInterval(() => {
        if (i >= count(d, fr, variant) - 1) { stop(); return; }
        go(1);
      }, d.kind === "pipeline" ? 450 : 1100);
    });
    el.addEventListener("pointerdown", () => { pointer = true; });
    el.addEventListener("keydown", () => { pointer = false; }, true);
    el.tabIndex = 0;
    // ← → step and space plays wherever the focus is inside the player, but on the menu (its
    // own arrows) and on a button (space presses it)
    el.addEventListener("keydown", (e) => {
      if (e.target.tagName === "SELECT") return;
      if (e.key === "ArrowRight") { stop(); go(1); e.preventDefault(); }
      else if (e.key === "ArrowLeft") { stop(); go(-1); e.preventDefault(); }
      else if (e.key === " " && e.target.tagName !== "BUTTON") { play.click(); e.preventDefault(); }
    });
    const title = doc.createElement("div");
    title.className = "mpa-title";
    title.textContent = d.title;
    el.setAttribute("role", "group");
    el.setAttribute("aria-label", `${d.title}: step-through animation (← → step, space plays)`);
    el.append(title, bar, stage, say);
    show();
    // redraw for the width the player has (a phone turned, a window resized)
    let lastWidth = stage.clientWidth;
    const view = doc.defaultView;
    if (view) {
      view.addEventListener("resize", () => {
        if (stage.clientWidth !== lastWidth) { lastWidth = stage.clientWidth; show(); }
      });
    }
  }

  const api = {frames, mount};
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  if (typeof document !== "undefined") {
    root.MiniparAnimation = api;
    const all = () => document.querySelectorAll(".minipar-animation").forEach(mount);
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all);
    else all();
  }
})(typeof window !== "undefined" ? window : globalThis);
