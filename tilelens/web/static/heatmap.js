// TileLens heatmaps: draws each tensor argument's cells on a canvas from /api/launches/ID/heatmaps, with
// element-index labels on its axes and the colour mode's legend, and shows what is under the pointer; a
// click goes to the source line of the cell's first access.
// Fit: square cells of min(24, floor(400 / cols), floor(320 / rows)) pixels, at least 1, so the panels sit
// side by side on one screen (the server already bins a large tensor into at most 65536 cells, each cell
// coloured by its busiest element); the zoom multiplies that, and a zoomed panel scrolls.
// Walking a launch: a program (picked on the grid view or by number) or one event of the trace (the slider
// and arrows walk them in trace order, fetched 200 at a time from /api/launches/ID/events) lights the cells
// it touched and its source lines; every other cell is drawn faded (dim()).
// Every text from the history goes in as textContent, never as HTML.
"use strict";
(function () {
  const root = document.getElementById("heatmaps");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const tip = $("tip"), select = $("heatmap-by"), zoom = $("heatmap-zoom"), step = $("step");
  const base = "/api/launches/" + encodeURIComponent(root.dataset.launch);
  let data = null;
  let lit = null;  // null: nothing selected; else {position: Set of cells}
  const events = new Map();  // trace row -> event, as fetched
  let eventCount = 0;

  function cellText(h, r, c) {
    const first = r * h.bin_rows * h.elements_per_row + c * h.bin_cols;
    const i = r * h.cols + c;
    let text = h.inside[i] ? "element " + first : "past the end +" + (first - h.numel);
    if (h.inside[i] && h.shape.length > 1) {
      const index = [];
      let rest = first;
      for (let d = h.shape.length - 1; d >= 0; d--) {
        index.unshift(rest % h.shape[d]);
        rest = Math.floor(rest / h.shape[d]);
      }
      text += " [" + index.join(", ") + "]";
    }
    const binned = h.bin_rows !== 1 || h.bin_cols !== 1;
    if (binned) text += " (cell of " + h.bin_rows + "x" + h.bin_cols + ")";
    const counts = [["reads", h.reads], ["writes", h.writes], ["atomics", h.atomics], ["masked", h.masked],
                    ["oob", h.oob]].filter(([, a]) => a[i]).map(([n, a]) => n + " " + a[i]);
    if (counts.length) text += ": " + counts.join(", ");
    if (binned && h.peak[i]) text += "; busiest element " + h.peak[i] + " accesses" + (h.peak_exact ? "" : " (mean)");
    const p = h.program[i];
    if (p >= 0) {
      const kind = h.kind[i] >= 0 ? data.kinds[h.kind[i]] : "?";
      text += "; first program (" + pid(p).join(", ") + "), " + kind + " at line " + h.line[i];
    }
    return text;
  }

  function pid(p) {
    const [gx, gy] = data.grid;
    return [p % gx, Math.floor(p / gx) % gy, Math.floor(p / (gx * gy))];
  }

  function dim(color) {  // a quarter of the colour, three quarters white
    const v = parseInt(color.slice(1), 16);
    const mix = (x) => Math.round(x + (255 - x) * 0.75);
    return "rgb(" + mix(v >> 16) + "," + mix((v >> 8) & 255) + "," + mix(v & 255) + ")";
  }

  function tickStep(cell, gap) {  // 1, 2, 5, 10, 20, ... cells: labels at least `gap` pixels apart
    let s = 1;
    while (s * cell < gap) s = String(s)[0] === "2" ? s * 5 / 2 : s * 2;
    return s;
  }

  function label(parent, cls, text, left, top) {
    const span = document.createElement("span");
    span.className = "tick " + cls;
    span.textContent = text;
    if (left !== null) span.style.left = left + "px";
    span.style.top = top + "px";
    parent.appendChild(span);
  }

  function cellAt(canvas, h, cell, ev) {
    const box = canvas.getBoundingClientRect();
    const c = Math.floor((ev.clientX - box.left) / cell), r = Math.floor((ev.clientY - box.top) / cell);
    return r >= 0 && c >= 0 && r < h.rows + h.band_rows && c < h.cols ? [r, c] : null;
  }

  function drawLegend(mode) {
    const box = $("legend");
    box.textContent = "";
    for (const [color, text] of data.legend[mode]) {
      const item = document.createElement("span");
      item.className = "item";
      const swatch = document.createElement("i");
      swatch.style.background = color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(text));
      box.appendChild(item);
    }
  }

  function draw() {
    root.textContent = "";
    const mode = select ? select.value : "count";
    const z = zoom ? Number(zoom.value) : 1;
    drawLegend(mode);
    if (!data.trace) {
      const p = document.createElement("p");
      p.textContent = "no access trace recorded";
      root.appendChild(p);
    }
    for (const h of data.heatmaps) {
      const rows = h.rows + h.band_rows;
      const cell = z * Math.max(1, Math.min(24, Math.floor(400 / Math.max(1, h.cols)), Math.floor(320 / rows)));
      const panel = document.createElement("div");
      panel.className = "panel";
      const caption = document.createElement("div");
      let text = h.name + "  " + (h.dtype || "") + " [" + h.shape.join("x") + "]";
      if (h.shape.length === 1) text += ", rows of " + h.elements_per_row;
      if (h.bin_rows !== 1 || h.bin_cols !== 1) text += ", one cell = " + h.bin_rows + "x" + h.bin_cols + " elements";
      caption.textContent = text;
      const scroll = document.createElement("div");
      scroll.className = "scroll";
      const plot = document.createElement("div");
      plot.className = "plot";
      const perRow = h.bin_rows * (h.shape.length <= 1 ? h.elements_per_row : 1);
      for (let c = 0, s = tickStep(cell, 40); c < h.cols; c += s) label(plot, "col-tick", c * h.bin_cols, 44 + c * cell, 0);
      for (let r = 0, s = tickStep(cell, 14); r < h.rows; r += s) label(plot, "row-tick", r * perRow, null, 14 + r * cell);
      const canvas = document.createElement("canvas");
      canvas.className = "heatmap";
      canvas.width = h.cols * cell;
      canvas.height = rows * cell;
      canvas.dataset.arg = h.name;
      canvas.dataset.position = h.position;
      canvas.dataset.cell = cell;
      const ctx = canvas.getContext("2d");
      const colors = h.color[mode], on = lit ? lit[h.position] || new Set() : null;
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < h.cols; c++) {
          const i = r * h.cols + c, color = data.colors[colors[i]];
          ctx.fillStyle = on && !on.has(i) ? dim(color) : color;
          ctx.fillRect(c * cell, r * cell, cell, cell);
        }
      }
      canvas.addEventListener("mousemove", (ev) => {
        const at = cellAt(canvas, h, cell, ev);
        if (!at) { tip.style.display = "none"; return; }
        tip.textContent = h.name + ": " + cellText(h, at[0], at[1]);
        tip.style.left = ev.clientX + 14 + "px";
        tip.style.top = ev.clientY + 14 + "px";
        tip.style.display = "block";
      });
      canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
      canvas.addEventListener("click", (ev) => {  // to the source line of the cell's first access
        const at = cellAt(canvas, h, cell, ev);
        const line = at ? h.line[at[0] * h.cols + at[1]] : -1;
        if (line >= 0) location.hash = "line-" + line;
      });
      plot.appendChild(canvas);
      scroll.appendChild(plot);
      panel.appendChild(caption);
      panel.appendChild(scroll);
      root.appendChild(panel);
    }
    root.dataset.ready = "1";
  }

  function markLines(lines) {
    for (const tr of document.querySelectorAll(".src tr.sel")) tr.classList.remove("sel");
    for (const line of lines) {
      const tr = $("line-" + line);
      if (tr) tr.classList.add("sel");
    }
  }

  function drawPrograms(current) {
    const canvas = $("programs");
    const [gx, gy, gz] = canvas.dataset.grid.split(",").map(Number);
    if (gx * gy * gz > 4096) { canvas.parentNode.style.display = "none"; return; }
    const cell = Math.max(4, Math.min(16, Math.floor(240 / gx)));
    canvas.width = gx * cell;
    canvas.height = gy * gz * cell;
    canvas.dataset.cell = cell;
    const ctx = canvas.getContext("2d");
    for (let p = 0; p < gx * gy * gz; p++) {
      ctx.fillStyle = p === current ? "#1a5fb4" : "#d0d7e2";
      ctx.fillRect((p % gx) * cell + 1, Math.floor(p / gx) * cell + 1, cell - 2, cell - 2);
    }
  }

  function getJSON(url) {
    return fetch(url).then((r) => { if (!r.ok) throw new Error(url + ": HTTP " + r.status); return r.json(); });
  }

  function showProgram(p) {
    getJSON(base + "/programs/" + p).then((found) => {
      lit = {};
      for (const h of found.heatmaps) lit[h.position] = new Set(h.cells);
      $("program").value = p;
      $("program-text").textContent = "program (" + found.pid.join(", ") + "): " + found.events + " events";
      $("step-text").textContent = "";
      drawPrograms(p);
      markLines(found.lines);
      draw();
      delete root.dataset.event;
      root.dataset.program = p;
    });
  }

  function fetchEvents(start) {
    return getJSON(base + "/events?start=" + start).then((page) => {
      eventCount = page.count;
      step.max = Math.max(0, page.count - 1);
      for (const ev of page.events) events.set(ev.index, ev);
    });
  }

  function showEvent(i) {
    if (i < 0 || i >= eventCount) return;
    const ready = events.has(i) ? Promise.resolve() : fetchEvents(i);
    ready.then(() => {
      const ev = events.get(i);
      step.value = i;
      lit = {};
      lit[ev.arg] = new Set(ev.cells);
      const h = data.heatmaps.find((m) => m.position === ev.arg);
      const row = $("line-" + ev.line);
      const source = row ? row.lastChild.textContent.trim() : "";
      $("step-text").textContent = "event " + (i + 1) + " of " + eventCount + ": program (" + ev.pid.join(", ") +
        ") " + ev.op + " " + (h ? h.name : "no argument") + " at line " + ev.line + ", " + ev.active + " of " +
        ev.lanes + " lanes active" + (ev.oob ? ", " + ev.oob + " out of bounds" : "") + (source ? ": " + source : "");
      $("program-text").textContent = "";
      drawPrograms(ev.program);
      markLines([ev.line]);
      draw();
      delete root.dataset.program;
      root.dataset.event = i;
    });
  }

  getJSON(base + "/heatmaps").then((json) => { data = json; draw(); drawPrograms(-1); return fetchEvents(0); });
  if (select) select.addEventListener("change", () => { if (data) draw(); });
  if (zoom) zoom.addEventListener("change", () => { if (data) draw(); });
  step.addEventListener("input", () => showEvent(Number(step.value)));
  $("step-prev").addEventListener("click", () => showEvent(Number(step.value) - 1));
  $("step-next").addEventListener("click", () => showEvent(root.dataset.event === undefined ? 0 : Number(step.value) + 1));
  $("program").addEventListener("change", () => showProgram(Number($("program").value)));
  $("program-all").addEventListener("click", () => {
    lit = null;
    $("program").value = "";
    $("program-text").textContent = $("step-text").textContent = "";
    delete root.dataset.event;
    delete root.dataset.program;
    drawPrograms(-1);
    markLines([]);
    draw();
  });
  $("programs").addEventListener("click", (ev) => {
    const canvas = $("programs"), cell = Number(canvas.dataset.cell), gx = Number(canvas.dataset.grid.split(",")[0]);
    const box = canvas.getBoundingClientRect();
    const c = Math.floor((ev.clientX - box.left) / cell), r = Math.floor((ev.clientY - box.top) / cell);
    if (c >= 0 && c < gx && r >= 0 && r * gx + c < canvas.width / cell * (canvas.height / cell)) showProgram(r * gx + c);
  });
})();
