// TileLens heatmaps: draws each tensor argument's cells on a canvas from /api/launches/ID/heatmaps and
// shows what is under the pointer; a click goes to the source line of the cell's first access. Same geometry
// as the PNG/SVG renderer: square cells of `cell` pixels, min(24, floor(960 / cols)) at least 1.
// Every text from the history goes in as textContent, never as HTML.
"use strict";
(function () {
  const root = document.getElementById("heatmaps");
  const tip = document.getElementById("tip");
  const select = document.getElementById("heatmap-by");
  if (!root) return;
  let data = null;

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
    if (h.bin_rows !== 1 || h.bin_cols !== 1) text += " (cell of " + h.bin_rows + "x" + h.bin_cols + ")";
    const counts = [["reads", h.reads], ["writes", h.writes], ["atomics", h.atomics], ["masked", h.masked],
                    ["oob", h.oob]].filter(([, a]) => a[i]).map(([n, a]) => n + " " + a[i]);
    if (counts.length) text += ": " + counts.join(", ");
    const p = h.program[i];
    if (p >= 0) {
      const [gx, gy] = data.grid;
      const pid = [p % gx, Math.floor(p / gx) % gy, Math.floor(p / (gx * gy))];
      const kind = h.kind[i] >= 0 ? data.kinds[h.kind[i]] : "?";
      text += "; first program (" + pid.join(", ") + "), " + kind + " at line " + h.line[i];
    }
    return text;
  }

  function draw() {
    root.textContent = "";
    const mode = select ? select.value : "access";
    if (!data.trace) {
      const p = document.createElement("p");
      p.textContent = "no access trace recorded";
      root.appendChild(p);
    }
    for (const h of data.heatmaps) {
      const rows = h.rows + h.band_rows;
      const cell = Math.max(1, Math.min(24, Math.floor(960 / Math.max(1, h.cols))));
      const caption = document.createElement("div");
      caption.textContent = h.name + "  " + (h.dtype || "") + " [" + h.shape.join("x") + "]";
      const canvas = document.createElement("canvas");
      canvas.className = "heatmap";
      canvas.width = h.cols * cell;
      canvas.height = rows * cell;
      canvas.dataset.arg = h.name;
      canvas.dataset.position = h.position;
      canvas.dataset.cell = cell;
      const ctx = canvas.getContext("2d");
      const colors = h.color[mode];
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < h.cols; c++) {
          ctx.fillStyle = data.colors[colors[r * h.cols + c]];
          ctx.fillRect(c * cell, r * cell, cell, cell);
        }
      }
      canvas.addEventListener("mousemove", (ev) => {
        const box = canvas.getBoundingClientRect();
        const c = Math.floor((ev.clientX - box.left) / cell);
        const r = Math.floor((ev.clientY - box.top) / cell);
        if (r < 0 || c < 0 || r >= rows || c >= h.cols) { tip.style.display = "none"; return; }
        tip.textContent = h.name + ": " + cellText(h, r, c);
        tip.style.left = ev.clientX + 14 + "px";
        tip.style.top = ev.clientY + 14 + "px";
        tip.style.display = "block";
      });
      canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
      canvas.addEventListener("click", (ev) => {  // to the source line of the cell's first access
        const box = canvas.getBoundingClientRect();
        const c = Math.floor((ev.clientX - box.left) / cell);
        const r = Math.floor((ev.clientY - box.top) / cell);
        const line = r >= 0 && c >= 0 && r < rows && c < h.cols ? h.line[r * h.cols + c] : -1;
        if (line >= 0) location.hash = "line-" + line;
      });
      root.appendChild(caption);
      root.appendChild(canvas);
    }
    root.dataset.ready = "1";
  }

  fetch("/api/launches/" + encodeURIComponent(root.dataset.launch) + "/heatmaps")
    .then((r) => { if (!r.ok) throw new Error("heatmaps: HTTP " + r.status); return r.json(); })
    .then((json) => { data = json; draw(); });
  if (select) select.addEventListener("change", () => { if (data) draw(); });
})();
