// report.html of `plan solve --out`: the front (hover: layout and figures), a table of every point, and for
// the selected point the cluster drawn (scale-up domains, nodes, GPUs by pool, pipeline stage and expert bank)
// and the KV tiers of session workloads. Everything comes from the JSON embedded in the page.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("plan-data").textContent);
  const front = D.front;
  const SVG = "http://www.w3.org/2000/svg";
  const ROLE_COLOURS = { mixed: "#4C78A8", prefill: "#F58518", midfill: "#B279A2", decode: "#54A24B" };
  // each point's figures as the JSON has them; tok/s/GPU is the ranked one (search.gpu_accounting), so the idle
  // GPUs it counts are shown beside the GPUs used, and the price and power figures beside it
  const FIGURES = [
    ["ttft_ms", "TTFT ms", 1], ["tpot_ms", "TPOT ms", 2], ["tokens_per_s_per_gpu", "tok/s/GPU", 1],
    ["tokens_per_s_per_user", "tok/s/user", 1], ["gpus", "GPUs", 0], ["idle_gpus", "idle", 0],
    ["usd_per_million_tokens", "$/Mtok", 3], ["tokens_per_s_per_mw", "tok/s/MW", 0],
  ];
  const tooltip = document.getElementById("tooltip");

  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function fmt(value, digits) {
    return typeof value === "number" ? value.toLocaleString("en-US", {
      minimumFractionDigits: digits, maximumFractionDigits: digits, useGrouping: false }) : String(value);
  }
  function poolText(pool) {
    return `${pool.replicas} x ${pool.role}${pool.group ? "@" + pool.group : ""} tp${pool.tp} dp${pool.dp_attention} pp${pool.pp} moe_tp${pool.moe_tp} ` +
      `ep${pool.moe_ep} batch ${pool.batch}`;
  }
  function pointText(point, index) {
    const lines = [`#${index} ${point.serving}`];
    for (const [key, label, digits] of FIGURES) {
      if (typeof point[key] === "number") lines.push(`${label}: ${fmt(point[key], digits)}`);
    }
    lines.push(`status ${point.status}, gap ${point.gap === null ? "-" : fmt(point.gap * 100, 2) + "%"}`);
    for (const pool of point.layout.pools) lines.push(poolText(pool));
    return lines.join("\n");
  }
  function showTip(event, text) {
    tooltip.textContent = text;
    tooltip.style.display = "block";
    tooltip.style.left = `${event.pageX + 12}px`;
    tooltip.style.top = `${event.pageY + 12}px`;
  }
  function hideTip() { tooltip.style.display = "none"; }

  // ---------------------------------------------------------------- the front
  function niceStep(span) {
    // 1, 2 or 5 times a power of ten, giving 4 to 10 grid lines over the span
    const raw = span / 5, power = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw);
  }
  function drawFront() {
    const width = 760, height = 380, left = 70, bottom = 45, top = 15, right = 20;
    const svg = el("svg:svg", { width, height, id: "front-chart", role: "img" });
    const xs = front.map((p) => p.tokens_per_s_per_gpu), ys = front.map((p) => p.ttft_ms);
    const xstep = niceStep(Math.max(...xs) * 1.05 || 1), ystep = niceStep(Math.max(...ys, D.slo.ttft_ms || 0) * 1.05 || 1);
    const xmax = xstep * Math.ceil((Math.max(...xs) * 1.05 || 1) / xstep);
    const ymax = ystep * Math.ceil((Math.max(...ys, D.slo.ttft_ms || 0) * 1.05 || 1) / ystep);
    const X = (x) => left + (x / xmax) * (width - left - right);
    const Y = (y) => height - bottom - (y / ymax) * (height - top - bottom);
    for (let gx = 0; gx <= xmax + xstep / 2; gx += xstep) {
      svg.append(el("svg:line", { x1: X(gx), x2: X(gx), y1: Y(0), y2: Y(ymax), class: "grid" }));
      svg.append(el("svg:text", { x: X(gx), y: height - bottom + 16, class: "tick", "text-anchor": "middle" },
        String(+gx.toPrecision(6))));
    }
    for (let gy = 0; gy <= ymax + ystep / 2; gy += ystep) {
      svg.append(el("svg:line", { x1: X(0), x2: X(xmax), y1: Y(gy), y2: Y(gy), class: "grid" }));
      svg.append(el("svg:text", { x: left - 6, y: Y(gy) + 4, class: "tick", "text-anchor": "end" },
        String(+gy.toPrecision(6))));
    }
    svg.append(el("svg:text", { x: (left + width) / 2, y: height - 6, class: "axis", "text-anchor": "middle" },
      "tokens/s per GPU"));
    svg.append(el("svg:text", { x: 14, y: height / 2, class: "axis", transform: `rotate(-90 14 ${height / 2})`,
      "text-anchor": "middle" }, "TTFT (ms)"));
    if (D.slo.ttft_ms) {
      svg.append(el("svg:line", { x1: X(0), x2: X(xmax), y1: Y(D.slo.ttft_ms), y2: Y(D.slo.ttft_ms), class: "slo" }));
    }
    const order = front.map((p, i) => i).sort((a, b) => front[a].ttft_ms - front[b].ttft_ms);
    let path = "";
    order.forEach((i, k) => {
      const p = front[i];
      path += k === 0 ? `M${X(p.tokens_per_s_per_gpu)},${Y(p.ttft_ms)}`
        : `H${X(p.tokens_per_s_per_gpu)}V${Y(p.ttft_ms)}`;
    });
    svg.append(el("svg:path", { d: path, class: "staircase" }));
    front.forEach((p, i) => {
      const x = X(p.tokens_per_s_per_gpu), y = Y(p.ttft_ms);
      const attrs = { class: `marker ${p.serving}`, "data-index": i };
      const marker = p.serving === "disaggregated"
        ? el("svg:rect", { ...attrs, x: x - 5, y: y - 5, width: 10, height: 10 })
        : p.serving === "composite"  // several deployments side by side: a diamond
          ? el("svg:path", { ...attrs, d: `M${x},${y - 6}L${x + 6},${y}L${x},${y + 6}L${x - 6},${y}Z` })
          : el("svg:circle", { ...attrs, cx: x, cy: y, r: 5 });
      marker.addEventListener("mousemove", (e) => showTip(e, pointText(p, i)));
      marker.addEventListener("mouseleave", hideTip);
      marker.addEventListener("click", () => select(i));
      svg.append(marker);
    });
    document.getElementById("front").append(svg);
  }

  // ---------------------------------------------------------------- table of points
  function drawTable() {
    const table = el("table", { id: "points" });
    const head = el("tr");
    for (const label of ["#", "serving", ...FIGURES.map((f) => f[1]), "status", "gap", "pools"]) {
      head.append(el("th", {}, label));
    }
    table.append(head);
    front.forEach((p, i) => {
      const row = el("tr", { class: `point ${p.serving}`, "data-index": i });
      row.append(el("td", {}, String(i)), el("td", { "data-key": "serving" }, p.serving));
      for (const [key, , digits] of FIGURES) {  // a figure a point lacks (an older plan file's) shows "-"
        const known = typeof p[key] === "number";
        row.append(el("td", { "data-key": key, class: "num", ...(known ? { "data-value": String(p[key]) } : {}) },
                      known ? fmt(p[key], digits) : "-"));
      }
      row.append(el("td", { "data-key": "status" }, p.status));
      row.append(el("td", { "data-key": "gap", class: "num" }, p.gap === null ? "-" : fmt(p.gap * 100, 2) + "%"));
      row.append(el("td", {}, p.layout.pools.map(poolText).join(" + ")));
      row.addEventListener("click", () => select(i));
      table.append(row);
    });
    document.getElementById("table").append(table);
  }

  // ---------------------------------------------------------------- the cluster of one point
  function gpuCells(point) {
    // Every GPU the point uses: "<group>/r<rack>/d<domain>:<gpu in domain>" -> what runs there.
    const cells = new Map();
    point.layout.pools.forEach((pool, p) => {
      const placed = point.placement.pools[p];
      const shape = point.placement.groups[placed.group];
      const nodesPerDomain = shape.domain_gpus / shape.gpus_per_node;
      // the pool's banks: named in its placement (by domain where placed group by group), else its degree
      const banks = D.expert_banks[(placed.experts && placed.experts.banks) || String(pool.moe_ep)];
      placed.instances.forEach((inst, instance) => {
        inst.gpus.forEach((id, offset) => {
          const [, rack, node, g] = id.match(/\/r(\d+)\/n(\d+)\/g(\d+)$/).map(Number);
          const key = `${placed.group}/r${rack}/d${Math.floor(node / nodesPerDomain)}:` +
            `${(node % nodesPerDomain) * shape.gpus_per_node + g}`;
          const stage = placed.stages.find((s) => offset >= s.gpu_offset[0] && offset <= s.gpu_offset[1]);
          const rank = stage ? Math.floor((offset - stage.gpu_offset[0]) / pool.moe_tp) : null;
          const experts = banks && rank !== null && pool.moe_ep > 1 ? banks.gpu_experts[rank] : null;
          cells.set(key, { pool: p, role: pool.role, instance, offset, stage, rank, experts, id });
        });
      });
    });
    return cells;
  }

  function drawCluster(point, index) {
    const box = document.getElementById("cluster");
    box.replaceChildren();
    const cells = gpuCells(point);
    const order = (k) => k.split(":")[0].match(/^(.*)\/r(\d+)\/d(\d+)$/);
    const domains = [...new Set([...cells.keys()].map((k) => k.split(":")[0]))].sort((a, b) => {
      const [, ga, ra, da] = order(a), [, gb, rb, db] = order(b);
      return ga === gb ? (Number(ra) - Number(rb)) || (Number(da) - Number(db)) : (ga < gb ? -1 : 1);
    });
    const shown = domains.slice(0, 48);
    const shapeOf = (domain) => point.placement.groups[order(domain)[1]];
    const cell = 16, gap = 3, nodeGap = 8;
    const geometry = shown.map((domain) => {
      const shape = shapeOf(domain), size = shape.domain_gpus, perNode = Math.min(shape.gpus_per_node, size);
      const perRow = Math.max(1, Math.floor(640 / (perNode * (cell + gap) + nodeGap)));
      const nodes = Math.ceil(size / perNode), nodeWidth = perNode * (cell + gap) + nodeGap;
      return { shape, size, perNode, perRow, nodes, nodeWidth, height: 22 + Math.ceil(nodes / perRow) * (cell + 14),
        width: 40 + Math.min(nodes, perRow) * nodeWidth };
    });
    const width = Math.max(100, ...geometry.map((g) => g.width));
    const tops = [];
    let y = 10;
    geometry.forEach((g) => { tops.push(y); y += g.height + 10; });
    const svg = el("svg:svg", { width, height: y, id: "cluster-drawing" });
    const unitOf = (g) => (g.size >= g.shape.gpus_per_rack ? "rack" : "scale-up domain");
    const unit = geometry.length && geometry.every((g) => unitOf(g) === "rack") ? "rack" : "scale-up domain";
    shown.forEach((domain, row) => {
      const { size, perNode, perRow, nodes, nodeWidth, height } = geometry[row];
      const y0 = tops[row];
      svg.append(el("svg:rect", { x: 4, y: y0, width: width - 8, height, class: "domain" }));
      svg.append(el("svg:text", { x: 10, y: y0 + 14, class: "label" },
        `${unitOf(geometry[row])} ${domain} (${size} GPUs)`));
      for (let node = 0; node < nodes; node++) {
        const nx = 12 + (node % perRow) * nodeWidth, ny = y0 + 20 + Math.floor(node / perRow) * (cell + 14);
        svg.append(el("svg:rect", { x: nx - 3, y: ny - 3, width: nodeWidth - nodeGap + 2, height: cell + 6,
          class: "node" }));
        for (let g = 0; g < perNode && node * perNode + g < size; g++) {
          const gpu = node * perNode + g, info = cells.get(`${domain}:${gpu}`);
          const attrs = { x: nx + g * (cell + gap), y: ny, width: cell, height: cell };
          if (!info) {
            svg.append(el("svg:rect", { ...attrs, class: "gpu idle" }));
            continue;
          }
          const stage = info.stage ? info.stage.stage : 0;
          const rect = el("svg:rect", { ...attrs, class: `gpu used ${info.role}`, fill: ROLE_COLOURS[info.role] || "#888",
            "fill-opacity": String(1 - 0.25 * (stage % 3)), "data-pool": info.pool, "data-stage": stage });
          const layers = info.stage ? `layers ${info.stage.layers[0]}-${info.stage.layers[1]}` : "";
          const bank = info.experts ? `EP rank ${info.rank}: ${info.experts.length} experts [${info.experts.join(", ")}]`
            : "experts: all (no expert parallelism)";
          const text = `${info.id}\n${info.role} instance ${info.instance}, ` +
            `GPU ${info.offset} of it\npipeline stage ${stage} (${layers})\n${bank}`;
          rect.addEventListener("mousemove", (e) => showTip(e, text));
          rect.addEventListener("mouseleave", hideTip);
          svg.append(rect);
          if (info.experts) {
            svg.append(el("svg:text", { x: attrs.x + cell / 2, y: ny + cell - 4, class: "bank",
              "text-anchor": "middle" }, String(info.experts.length)));
          }
        }
      }
    });
    box.append(el("h3", {}, `Point ${index}: ${point.serving}, ${cells.size} GPUs in ${domains.length} ${unit}${domains.length === 1 ? "" : "s"}`));
    box.append(svg);
    if (domains.length > shown.length) box.append(el("p", {}, `${domains.length - shown.length} more not drawn`));
    const legend = el("p", { class: "legend" });
    point.layout.pools.forEach((pool) => {
      legend.append(el("span", { class: "swatch", style: `background:${ROLE_COLOURS[pool.role] || "#888"}` }),
        el("span", {}, `${poolText(pool)}   `));
    });
    legend.append(el("span", {}, "(shade: pipeline stage; number: experts in the GPU's bank)"));
    box.append(legend);
    document.body.dataset.drawnGpus = String(cells.size);
  }

  function drawTiers(point) {
    const box = document.getElementById("tiers");
    box.replaceChildren();
    const tiers = point.kv_tiers;
    if (!tiers) return;
    box.append(el("h3", {}, "KV tiers of the fill pool"));
    const table = el("table", { id: "tier-table" });
    const head = el("tr");
    for (const label of ["tier", "capacity GB", "holds GB", "hit rate", "fetch GB/s", ""]) head.append(el("th", {}, label));
    table.append(head);
    const most = Math.max(1, ...Object.values(tiers.capacity_gb || {}), ...Object.values(tiers.stored_gb || {}));
    for (const [tier, hit] of Object.entries(tiers.hit_rates || {})) {
      const capacity = (tiers.capacity_gb || {})[tier], held = (tiers.stored_gb || {})[tier];
      const fetch = (tiers.fetch_gb_per_s || {})[tier];
      const row = el("tr", { "data-tier": tier });
      row.append(el("td", {}, tier), el("td", { class: "num" }, capacity === undefined ? "-" : fmt(capacity, 1)),
        el("td", { class: "num", "data-value": held === undefined ? "" : String(held) },
          held === undefined ? "-" : fmt(held, 1)),
        el("td", { class: "num", "data-value": String(hit) }, fmt(hit * 100, 1) + "%"),
        el("td", { class: "num" }, fetch === undefined ? "-" : fmt(fetch, 2)));
      const bar = el("td");
      const svg = el("svg:svg", { width: 220, height: 12 });
      if (capacity !== undefined) svg.append(el("svg:rect", { x: 0, y: 2, width: 220 * capacity / most, height: 8, class: "capacity" }));
      if (held !== undefined) svg.append(el("svg:rect", { x: 0, y: 2, width: 220 * held / most, height: 8, class: "held" }));
      bar.append(svg);
      row.append(bar);
      table.append(row);
    }
    box.append(table);
    box.append(el("p", {}, `TTFT spent fetching: ${fmt(100 * (tiers.fetch_share_of_ttft || 0), 1)}%; ` +
      `copies of this deployment for the arrival rate: ${fmt(tiers.deployments_for_arrival_rate || 0, 2)}`));
    if (point.midfill && point.midfill.why) box.append(el("p", {}, `midfill: ${point.midfill.why}`));
  }

  function select(index) {
    const point = front[index];
    document.querySelectorAll("tr.point").forEach((row) => row.classList.toggle("selected", Number(row.dataset.index) === index));
    document.querySelectorAll(".marker").forEach((m) => m.classList.toggle("selected", Number(m.dataset.index) === index));
    const detail = document.getElementById("detail");
    detail.textContent = pointText(point, index);
    drawCluster(point, index);
    drawTiers(point);
    document.body.dataset.selected = String(index);
  }

  drawFront();
  drawTable();
  const wanted = /point=(\d+)/.exec(location.hash);
  if (front.length) select(wanted && Number(wanted[1]) < front.length ? Number(wanted[1]) : 0);
  document.body.dataset.rendered = String(front.length);
})();
