// The autotune job page: jobs list, one job, two jobs compared.
// Served live by the REST service (data from the /v1 API, polled while jobs run) or inlined in
// a report file written by `autotune report` (data from the #autotune-data element, no network).
// Every plot is drawn by plotly.js; this file only decides what goes on which axis.
"use strict";

(function () {
  const body = document.body;
  const app = document.getElementById("app");
  const inlineData = document.getElementById("autotune-data");
  const POLL_MS = Number(body.dataset.pollMs || 2000);
  const TOKEN_KEY = "autotune.token";
  const PAGE_SIZE = 100; // the API's largest page of trials
  const RUNNING = new Set(["queued", "running"]);
  const PLOT_CONFIG = { displaylogo: false, responsive: true };

  // -- reading the data ----------------------------------------------------------------------

  // `refused`: the token the request carried (null when it carried none).
  class Unauthorized extends Error {
    constructor(refused) {
      super("the server asks for a token");
      this.refused = refused;
    }
  }

  async function api(path) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const response = await fetch(path, { headers, cache: "no-store" });
    if (response.status === 401) throw new Unauthorized(token);
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      const detail = typeof answer.detail === "string" ? answer.detail : "";
      throw new Error(detail || `${path} answered HTTP ${response.status}`);
    }
    return response.json();
  }

  // The job, its trials (only the new ones when `known` holds earlier ones) and its
  // recommendation, in the shape job_page_data() writes into a report.
  async function loadJob(id, known) {
    const job = await api(`/v1/jobs/${id}`);
    const trialsPage = (offset) => api(`/v1/jobs/${id}/trials?offset=${offset}&limit=${PAGE_SIZE}`);
    const knownTrials = known ? known.trials : [];
    const first = await trialsPage(knownTrials.length);
    // The first page tells how many there are; the rest are fetched side by side.
    const offsets = [];
    for (let offset = knownTrials.length + PAGE_SIZE; offset < first.count; offset += PAGE_SIZE) {
      offsets.push(offset);
    }
    const rest = await Promise.all(offsets.map(trialsPage));
    const trials = knownTrials.concat(first.data, ...rest.map((page) => page.data));
    let recommendation = known ? known.recommendation : null;
    if (!recommendation && job.recommendation_ready) {
      recommendation = await api(`/v1/jobs/${id}/recommendation`);
    }
    return { job, trials, recommendation };
  }

  // -- small helpers -------------------------------------------------------------------------

  const esc = (value) => String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const fixed = (value, digits) => (value == null ? "" : Number(value).toFixed(digits));
  const rate = (value) => (value == null ? "" : Number(value).toLocaleString("en-US",
    { maximumFractionDigits: 1 }));
  const bytes = (value) => {
    if (value == null) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let size = Number(value), unit = 0;
    while (size >= 1024 && unit < units.length - 1) { size /= 1024; unit += 1; }
    return `${size.toFixed(unit ? 1 : 0)} ${units[unit]}`;
  };
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
  const show = (template) => {
    app.replaceChildren(document.getElementById(template).content.cloneNode(true));
  };

  // What a trial came to, in the words of the legend and the table.
  function outcomeOf(trial) {
    if (trial.interrupted) return "interrupted";
    if (trial.pruned) return "pruned";
    if (trial.outcome === "ok" && trial.within_budget === false) return "over budget";
    if (trial.outcome === "ok" && trial.losses_finite === false) return "nonfinite";
    return trial.outcome;
  }
  const OUTCOME_COLOURS = {
    ok: "#1f77b4", pruned: "#9aa0a6", "over budget": "#ff7f0e", oom: "#d62728",
    timeout: "#9467bd", error: "#8c1c13", crashed: "#111111", nonfinite: "#8c564b",
    interrupted: "#c7c7c7",
  };
  const PRECISION_COLOURS = { off: "#1f77b4", fp16: "#2ca02c", bf16: "#d62728" };
  const measured = (trial) => trial.samples_per_s != null;
  const precisionOf = (trial) => (trial.config || {}).amp || "off";
  const reasonOf = (trial) => trial.error
    || (trial.signal ? `killed by ${trial.signal}` : "")
    || (trial.exit_code ? `exit code ${trial.exit_code}` : "");
  const configLine = (config) => Object.entries(config || {})
    .filter(([, value]) => value != null).map(([k, v]) => `${k}=${v}`).join(", ");
  const hoverOf = (trial) => `trial ${trial.number} (${trial.phase}, ${outcomeOf(trial)})`
    + `<br>${esc(configLine(trial.config)).replace(/(([^,]*,){4})/g, "$1<br>")}`
    + (reasonOf(trial) ? `<br>${esc(reasonOf(trial).slice(0, 160))}` : "");

  function groupBy(items, key) {
    const groups = new Map();
    for (const item of items) {
      const name = key(item);
      if (!groups.has(name)) groups.set(name, []);
      groups.get(name).push(item);
    }
    return groups;
  }

  function layout(extra) {
    return {
      margin: { l: 70, r: 20, t: 60, b: 55 },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      hovermode: "closest",
      uirevision: "keep", // a user's zoom survives the live updates
      font: { size: 13 },
      ...extra,
    };
  }
  const draw = (id, traces, extra) => Plotly.react(id, traces, layout(extra), PLOT_CONFIG);

  // -- the job page --------------------------------------------------------------------------

  function renderSummary({ job, trials }) {
    document.getElementById("job-title").textContent =
      `Job ${job.id}: ${job.workload_name || job.workload}`;
    const device = job.device ? (job.device.name || job.device.type) : (job.options || {}).device;
    const progress = job.progress || {};
    const best = progress.best ? `; best so far ${rate(progress.best.samples_per_s)} samples/s`
      : "";
    document.getElementById("job-meta").innerHTML = `<span class="status ${esc(job.status)}"`
      + ` id="job-status">${esc(job.status)}</span> on ${esc(device || "")}; `
      + `<span id="job-progress">${progress.trials_done ?? 0} of ${progress.trials_budget ?? 0}`
      + ` trials</span>, ${progress.confirm_done ?? 0} confirmation runs${best}; `
      + `created ${esc(when(job.created_at))}`;
    const error = document.getElementById("job-error");
    error.hidden = !job.error;
    error.textContent = job.error || "";
    document.getElementById("trials-count").textContent = `(${trials.length})`;
    const earlier = trials.filter((t) => setOf(t) < currentSet(job)).length;
    const note = document.getElementById("earlier-sets");
    note.hidden = !earlier;
    note.textContent = earlier ? `${earlier} trials ran on other hardware or software before `
      + `the job moved (earlier measurement sets): they are listed in the table, marked, and `
      + `neither plotted nor ranked.` : "";
  }

  // A job resumed on other hardware measures anew in a new set; only its current set counts.
  const setOf = (trial) => trial.measurement_set ?? 1;
  const currentSet = (job) => job.measurement_set ?? 1;

  function copyText(text, button) {
    const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text, done));
    } else {
      fallbackCopy(text, done);
    }
  }
  function fallbackCopy(text, done) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
    done();
  }

  function renderRecommendation({ job, recommendation: rec }) {
    const box = document.getElementById("recommendation");
    if (!rec) {
      box.innerHTML = `<h2>Recommendation</h2><p class="muted">None yet: the job is `
        + `${esc(job.status)}. It appears here when the search and the confirmation rounds `
        + `have finished.</p>`;
      return;
    }
    const spread = rec.speedup_spread
      ? ` <span class="muted spread">(per-round ${fixed(rec.speedup_spread.min, 2)}x to `
        + `${fixed(rec.speedup_spread.max, 2)}x)</span>` : "";
    const badge = rec.within_noise
      ? '<span class="badge noise">within noise</span>'
      : '<span class="badge real">beyond noise</span>';
    const speedup = rec.speedup == null ? "no speedup measured" : `${fixed(rec.speedup, 2)}x`;
    const metrics = rec.metrics || {};
    const exports = { ...(rec.exports || {}), "recommendation JSON": rec };
    box.innerHTML = `<h2>Recommendation</h2>
      <p class="speedup" id="speedup">${speedup}${spread}${badge}</p>
      <p id="verdict">${esc(rec.verdict)}</p>
      <p><strong>Diagnosis:</strong> <span id="diagnosis">${esc(rec.diagnosis)}</span></p>
      <p class="muted">${rate(metrics.samples_per_s)} samples/s, step ${fixed(metrics.step_time_ms, 1)} ms,
        data wait ${fixed((metrics.data_wait_fraction ?? 0) * 100, 0)}%; baseline
        ${rate(((rec.baseline || {}).metrics || {}).samples_per_s)} samples/s</p>
      <div class="config" id="rec-config">${Object.entries(rec.config || {}).map(([k, v]) =>
        `<div><span class="muted">${esc(k)}</span> <strong>${esc(v ?? "default")}</strong></div>`).join("")}</div>
      <div class="exports">${Object.entries(exports).map(([name, value], i) => `
        <details${i === 0 ? " open" : ""}><summary>${esc(name)}
          <button type="button" data-export="${i}">Copy</button></summary>
          <pre>${esc(JSON.stringify(value, null, 2))}</pre></details>`).join("")}</div>`;
    const texts = Object.values(exports).map((value) => JSON.stringify(value, null, 2));
    box.querySelectorAll("button[data-export]").forEach((button) => {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        copyText(texts[Number(button.dataset.export)], button);
      });
    });
  }

  function historyTraces(trials) {
    const traces = [];
    const searched = trials.filter((t) => t.phase !== "confirm");
    for (const [outcome, group] of groupBy(searched, outcomeOf)) {
      traces.push({
        type: "scatter", mode: "markers", name: outcome, meta: "trials",
        x: group.map((t) => t.number), y: group.map((t) => t.samples_per_s ?? 0),
        text: group.map(hoverOf), hovertemplate: "%{y:,.1f} samples/s<br>%{text}<extra></extra>",
        marker: { color: OUTCOME_COLOURS[outcome] || "#444", size: 9,
                  symbol: group.map((t) => (measured(t) ? "circle" : "x")) },
      });
    }
    const confirm = trials.filter((t) => t.phase === "confirm");
    if (confirm.length) {
      traces.push({
        type: "scatter", mode: "markers", name: "confirmation rounds", meta: "trials",
        x: confirm.map((t) => t.number), y: confirm.map((t) => t.samples_per_s ?? 0),
        text: confirm.map(hoverOf), hovertemplate: "%{y:,.1f} samples/s<br>%{text}<extra></extra>",
        marker: { color: "#17becf", size: 10, symbol: "diamond",
                  line: { color: "#0b5563", width: 1 } },
      });
    }
    let best = -Infinity;
    const line = { x: [], y: [] };
    for (const t of searched) {
      if (outcomeOf(t) === "ok" && measured(t)) best = Math.max(best, t.samples_per_s);
      if (best > -Infinity) { line.x.push(t.number); line.y.push(best); }
    }
    traces.push({ type: "scatter", mode: "lines", name: "best so far", x: line.x, y: line.y,
                  line: { shape: "hv", color: "#2ca02c", width: 2 }, hoverinfo: "skip" });
    return { traces, confirm };
  }

  function renderHistory(trials) {
    const { traces, confirm } = historyTraces(trials);
    const shapes = [], annotations = [];
    if (confirm.length) {
      const first = Math.min(...confirm.map((t) => t.number)) - 0.5;
      const last = Math.max(...confirm.map((t) => t.number)) + 0.5;
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: first, x1: last, y0: 0, y1: 1,
                    fillcolor: "#17becf", opacity: 0.08, line: { width: 0 } });
      annotations.push({ xref: "x", yref: "paper", x: (first + last) / 2, y: 0.98, yanchor: "top",
                         text: "confirmation rounds", showarrow: false,
                         font: { color: "#0b5563" } });
    }
    draw("plot-history", traces, {
      xaxis: { title: { text: "trial (in the order run)" }, zeroline: false },
      yaxis: { title: { text: "samples/s" }, rangemode: "tozero" },
      shapes, annotations,
    });
  }

  // Measured trials by precision, plus the recommended configuration as a highlighted point.
  function byPrecision(trials, x, y) {
    const traces = [];
    for (const [precision, group] of groupBy(trials, precisionOf)) {
      traces.push({
        type: "scatter", mode: "markers", name: `amp ${precision}`, meta: "trials",
        x: group.map(x), y: group.map(y), text: group.map(hoverOf),
        hovertemplate: "%{text}<extra></extra>",
        marker: { color: PRECISION_COLOURS[precision] || "#7f7f7f", size: 9, opacity: 0.8,
                  symbol: group.map((t) => (outcomeOf(t) === "ok" ? "circle" : "circle-open")) },
      });
    }
    return traces;
  }
  const recommendedPoint = (x, y) => ({
    type: "scatter", mode: "markers", name: "recommended", meta: "recommended", x: [x], y: [y],
    hovertemplate: "recommended: %{y:,.1f} samples/s (confirmed median)<extra></extra>",
    marker: { symbol: "star", size: 20, color: "#ffd700", line: { color: "#000", width: 1.5 } },
  });

  function renderKnobPlots(trials, rec) {
    const points = trials.filter(measured);
    for (const [id, knob, title, axis] of [
      ["plot-batch", "batch_size", "batch size", { type: "log", dtick: Math.log10(2) }],
      ["plot-workers", "num_workers", "DataLoader workers", { dtick: 1 }],
    ]) {
      const usable = points.filter((t) => (t.config || {})[knob] != null);
      const traces = byPrecision(usable, (t) => t.config[knob], (t) => t.samples_per_s);
      if (rec && rec.config && rec.config[knob] != null) {
        traces.push(recommendedPoint(rec.config[knob], (rec.metrics || {}).samples_per_s));
      }
      draw(id, traces, {
        xaxis: { title: { text: title }, ...axis },
        yaxis: { title: { text: "samples/s" }, rangemode: "tozero" },
      });
    }
  }

  function renderMemory(trials, rec, job) {
    // On CUDA the device's peak memory decides what fits; on a CPU, the process tree's.
    const device = ((job.device || {}).type || "cpu") !== "cpu"
      && trials.some((t) => t.peak_memory_bytes != null);
    const key = device ? "peak_memory_bytes" : "peak_host_memory_bytes";
    const points = trials.filter((t) => measured(t) && t[key] != null);
    const traces = byPrecision(points, (t) => t.samples_per_s, (t) => t[key]);
    if (rec && rec.metrics) {
      const recMemory = device ? rec.metrics.peak_memory_bytes : rec.metrics.peak_host_memory_bytes;
      if (recMemory != null) traces.push(recommendedPoint(rec.metrics.samples_per_s, recMemory));
    }
    const budget = rec ? rec.memory_budget_bytes : null;
    const shapes = [], annotations = [];
    if (budget) {
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: budget, y1: budget,
                    line: { color: "#d62728", dash: "dash", width: 2 } });
      annotations.push({ xref: "paper", x: 1, xanchor: "right", y: budget, yanchor: "bottom",
                         text: `memory budget ${bytes(budget)}`, showarrow: false,
                         font: { color: "#d62728" } });
    }
    draw("plot-memory", traces, {
      xaxis: { title: { text: "samples/s" }, rangemode: "tozero" },
      yaxis: { title: { text: device ? "peak device memory" : "peak host memory (process tree)" },
               ticksuffix: "B", tickformat: "~s", rangemode: "tozero" },
      shapes, annotations,
    });
  }

  // The profile: what the step alone and the loader alone reach, the two ceilings of every
  // configuration, with the measured trials under them; and how well it predicted each trial.
  // A job without a profile (--no-profile) hides the section.
  const profileOf = (data) => data.job.profile || (data.recommendation || {}).profile || null;

  function renderCapacity(data, trials) {
    const profile = profileOf(data);
    document.getElementById("capacity").hidden = !profile;
    if (!profile) return;
    const steps = [];
    const ran = profile.step.filter((p) => p.samples_per_s != null);
    for (const [name, group] of groupBy(ran, (p) => `${p.amp}${p.channels_last ? ", channels_last" : ""}`)) {
      steps.push({
        type: "scatter", mode: "lines+markers", name: `step alone, amp ${name}`, meta: "step",
        x: group.map((p) => p.batch_size), y: group.map((p) => p.samples_per_s),
        hovertemplate: "step alone: %{y:,.1f} samples/s at batch %{x}<extra></extra>",
        line: { color: PRECISION_COLOURS[group[0].amp] || "#7f7f7f",
                dash: group[0].channels_last ? "dot" : "solid" },
      });
    }
    const loaderBest = profile.loader.reduce(
      (best, p) => (best && best.samples_per_s >= p.samples_per_s ? best : p), null);
    const batches = ran.map((p) => p.batch_size);
    if (loaderBest && batches.length) {
      steps.push({
        type: "scatter", mode: "lines", name: `loader alone, best (${loaderBest.num_workers} workers)`,
        meta: "loader-best", x: [Math.min(...batches), Math.max(...batches)],
        y: [loaderBest.samples_per_s, loaderBest.samples_per_s],
        hovertemplate: "loader alone: %{y:,.1f} samples/s<extra></extra>",
        line: { color: "#8c564b", dash: "dash" },
      });
    }
    const points = trials.filter((t) => measured(t) && (t.config || {}).batch_size != null);
    draw("plot-capacity", [...steps, ...byPrecision(points, (t) => t.config.batch_size,
                                                    (t) => t.samples_per_s)], {
      xaxis: { title: { text: "batch size" }, type: "log", dtick: Math.log10(2) },
      yaxis: { title: { text: "samples/s" }, rangemode: "tozero" },
    });
    draw("plot-loader", [{
      type: "scatter", mode: "lines+markers", name: "loader alone", meta: "loader",
      x: profile.loader.map((p) => p.num_workers), y: profile.loader.map((p) => p.samples_per_s),
      hovertemplate: "loader alone: %{y:,.1f} samples/s with %{x} workers<extra></extra>",
      line: { color: "#8c564b" },
    }], {
      xaxis: { title: { text: "DataLoader workers" } },
      yaxis: { title: { text: `samples/s (batch ${profile.loader_batch_size})` }, rangemode: "tozero" },
    });
    // Each measured trial at the profile's prediction (filled) and, where the job had runs of
    // other configurations before it, at the job's: the profile's times the scale those runs set
    // (hollow; the trial's prediction_scale).
    const predicted = trials.filter((t) => measured(t) && t.predicted_samples_per_s != null);
    const scaled = predicted.filter((t) => t.prediction_scale != null);
    const jobs = (t) => t.predicted_samples_per_s * t.prediction_scale;
    const top = Math.max(0, ...predicted.flatMap((t) => [t.samples_per_s, t.predicted_samples_per_s]),
                         ...scaled.map(jobs));
    const colours = (group) => group.map((t) => PRECISION_COLOURS[precisionOf(t)] || "#7f7f7f");
    draw("plot-predicted", [
      { type: "scatter", mode: "lines", name: "measured = predicted", x: [0, top], y: [0, top],
        line: { color: "#aaa", dash: "dot" }, hoverinfo: "skip" },
      { type: "scatter", mode: "markers", name: "the profile's prediction", meta: "predicted",
        x: predicted.map((t) => t.predicted_samples_per_s), y: predicted.map((t) => t.samples_per_s),
        text: predicted.map(hoverOf),
        hovertemplate: "the profile predicted %{x:,.1f}, measured %{y:,.1f} samples/s<br>%{text}<extra></extra>",
        marker: { color: colours(predicted), size: 9 } },
      { type: "scatter", mode: "markers", name: "the job's (profile x scale of the runs before)",
        meta: "scaled", x: scaled.map(jobs), y: scaled.map((t) => t.samples_per_s),
        text: scaled.map((t) => `scale ${fixed(t.prediction_scale, 2)}; ${hoverOf(t)}`),
        hovertemplate: "the job predicted %{x:,.1f}, measured %{y:,.1f} samples/s<br>%{text}<extra></extra>",
        marker: { color: colours(scaled), size: 9, symbol: "circle-open", line: { width: 2 } } },
    ], {
      xaxis: { title: { text: "predicted samples/s" }, rangemode: "tozero" },
      yaxis: { title: { text: "measured samples/s" }, rangemode: "tozero" },
    });
  }

  const TRIAL_COLUMNS = [
    { label: "#", value: (t) => t.number, num: true },
    { label: "phase", value: (t) => t.phase },
    { label: "set", value: setOf, num: true, show: (v) => (v < tableState.currentSet
      ? `${v} (earlier hardware)` : String(v)) },
    { label: "outcome", value: outcomeOf },
    { label: "samples/s", value: (t) => t.samples_per_s, show: rate, num: true },
    { label: "step ms", value: (t) => t.step_time_median_ms, show: (v) => fixed(v, 2), num: true },
    { label: "compile s", value: (t) => t.compile_s, show: (v) => fixed(v, 1), num: true },
    { label: "data wait", value: (t) => t.data_wait_fraction,
      show: (v) => (v == null ? "" : `${fixed(v * 100, 0)}%`), num: true },
    { label: "device mem", value: (t) => t.peak_memory_bytes, show: bytes, num: true },
    { label: "host mem", value: (t) => t.peak_host_memory_bytes, show: bytes, num: true },
    { label: "batch", value: (t) => (t.config || {}).batch_size, num: true },
    { label: "workers", value: (t) => (t.config || {}).num_workers, num: true },
    { label: "amp", value: precisionOf },
    { label: "seconds", value: (t) => t.duration_s, show: (v) => fixed(v, 1), num: true },
    { label: "reason", value: reasonOf, cls: "reason" },
    { label: "other knobs", cls: "knobs", value: (t) => configLine(Object.fromEntries(
      Object.entries(t.config || {}).filter(([k]) => !["batch_size", "num_workers", "amp"]
        .includes(k)))) },
  ];
  const tableState = { column: 0, ascending: true, currentSet: 1 };

  const blank = (value) => value == null || value === "";
  // Blanks (a failed trial has no throughput) sort last in either direction.
  function compareRows(a, b, ascending) {
    if (blank(a) || blank(b)) return Number(blank(a)) - Number(blank(b));
    const order = typeof a === "number" && typeof b === "number" ? a - b
      : String(a).localeCompare(String(b));
    return ascending ? order : -order;
  }

  function renderTable(trials) {
    const table = document.getElementById("trials-table");
    const { column, ascending } = tableState;
    table.tHead.innerHTML = `<tr>${TRIAL_COLUMNS.map((c, i) => `<th data-column="${i}"`
      + `${c.num ? ' class="num"' : ""}${i === column ? ` aria-sort="${ascending ? "ascending" : "descending"}"` : ""}`
      + `>${esc(c.label)}</th>`).join("")}</tr>`;
    const value = TRIAL_COLUMNS[column].value;
    const rows = trials.slice().sort((a, b) => compareRows(value(a), value(b), ascending));
    table.tBodies[0].innerHTML = rows.map((t) => `<tr${setOf(t) < tableState.currentSet
      ? ' class="earlier-set"' : ""} data-set="${setOf(t)}">${TRIAL_COLUMNS.map((c) => {
      const v = c.value(t);
      const classes = [c.num ? "num" : "", c.cls || ""].filter(Boolean).join(" ");
      return `<td${classes ? ` class="${classes}"` : ""}>${esc(c.show ? c.show(v) : v)}</td>`;
    }).join("")}</tr>`).join("");
    table.tHead.onclick = (event) => {
      const th = event.target.closest("th");
      if (!th) return;
      const clicked = Number(th.dataset.column);
      tableState.ascending = clicked === tableState.column ? !tableState.ascending : true;
      tableState.column = clicked;
      renderTable(trials);
    };
  }

  function renderJob(data) {
    renderSummary(data);
    renderRecommendation(data);
    const current = data.trials.filter((t) => setOf(t) === currentSet(data.job));
    renderHistory(current);
    renderKnobPlots(current, data.recommendation);
    renderMemory(current, data.recommendation, data.job);
    renderCapacity(data, current);
    tableState.currentSet = currentSet(data.job);
    renderTable(data.trials);
    body.dataset.trials = String(data.trials.length);
    body.dataset.status = data.job.status;
  }

  async function jobPage() {
    if (inlineData) {
      const data = JSON.parse(inlineData.textContent);
      show("job-view");
      renderJob(data);
      document.getElementById("home-link").removeAttribute("href");
      document.getElementById("bar-note").textContent = `report written ${new Date(
        document.lastModified).toLocaleString()}; opens offline`;
      ready();
      return;
    }
    const id = Number(body.dataset.job);
    let data = null;
    const refresh = async () => {
      const before = data;
      data = await loadJob(id, data);
      if (!before) show("job-view");
      renderJob(data);
      ready();
      if (RUNNING.has(data.job.status)) schedule(refresh);
    };
    await refresh();
  }

  // -- the jobs list -------------------------------------------------------------------------

  const speedups = new Map(); // job id -> recommendation speedup (fixed once a job succeeded)

  async function speedupOf(job) {
    if (!job.recommendation_ready) return null;
    if (!speedups.has(job.id)) {
      speedups.set(job.id, (await api(`/v1/jobs/${job.id}/recommendation`)).speedup);
    }
    return speedups.get(job.id);
  }

  async function jobsPage() {
    show("jobs-view");
    const filter = document.getElementById("status-filter");
    const compare = document.getElementById("compare-button");
    const selected = new Set();
    filter.value = new URLSearchParams(location.search).get("status") || "";
    let timer = null;
    const refresh = async () => {
      clearTimeout(timer);
      const query = filter.value ? `&status=${encodeURIComponent(filter.value)}` : "";
      const page = await api(`/v1/jobs?limit=100${query}`);
      const values = await Promise.all(page.data.map(speedupOf));
      document.getElementById("jobs-count").textContent = `${page.count} jobs`;
      document.querySelector("#jobs-table tbody").innerHTML = page.data.map((job, i) => {
        const p = job.progress || {};
        const device = job.device ? (job.device.name || job.device.type) : job.options.device;
        return `<tr data-job="${job.id}" data-status="${esc(job.status)}">
          <td><input type="checkbox" data-select="${job.id}"${selected.has(job.id) ? " checked" : ""}></td>
          <td><a href="/jobs/${job.id}">${job.id}</a></td><td>${esc(job.workload)}</td>
          <td>${esc(device)}</td><td><span class="status ${esc(job.status)}">${esc(job.status)}</span></td>
          <td class="num progress">${p.trials_done ?? 0} / ${p.trials_budget ?? 0}`
          + `${p.confirm_done ? ` + ${p.confirm_done} confirm` : ""}</td>
          <td class="num">${p.best ? `${rate(p.best.samples_per_s)} samples/s` : ""}</td>
          <td class="num speedup-cell">${values[i] == null ? "" : `${fixed(values[i], 2)}x`}</td>
          <td>${esc(when(job.created_at))}</td></tr>`;
      }).join("");
      ready();
      timer = schedule(refresh);
    };
    filter.addEventListener("change", () => {
      const url = new URL(location.href);
      if (filter.value) url.searchParams.set("status", filter.value);
      else url.searchParams.delete("status");
      history.replaceState(null, "", url);
      guard(refresh);
    });
    document.getElementById("jobs-table").addEventListener("change", (event) => {
      const id = Number(event.target.dataset.select);
      if (!id) return;
      if (event.target.checked) selected.add(id); else selected.delete(id);
      compare.disabled = selected.size !== 2;
    });
    compare.addEventListener("click", () => {
      location.href = `/compare?jobs=${[...selected].join(",")}`;
    });
    await refresh();
  }

  // -- two jobs side by side -----------------------------------------------------------------

  async function comparePage() {
    const ids = (new URLSearchParams(location.search).get("jobs") || "").split(",")
      .map(Number).filter((id) => id > 0);
    if (ids.length < 2) throw new Error("name two jobs to compare, e.g. /compare?jobs=1,2");
    const jobs = await Promise.all(ids.map((id) => loadJob(id, null)));
    show("compare-view");
    const label = ({ job }) => `job ${job.id} · ${job.device ? (job.device.name || job.device.type) : job.options.device}`;
    document.getElementById("compare-columns").innerHTML = jobs.map((data) => {
      const rec = data.recommendation;
      return `<div class="card"><h2><a href="/jobs/${data.job.id}">${esc(label(data))}</a></h2>
        <p>${esc(data.job.workload)}: ${esc(data.job.status)}, ${data.trials.length} trials</p>
        <p class="speedup">${rec && rec.speedup != null ? `${fixed(rec.speedup, 2)}x` : "—"}</p>
        <p>${rec ? `${rate(rec.metrics.samples_per_s)} samples/s recommended` : "no recommendation yet"}</p>
        <p class="muted">${esc(rec ? rec.diagnosis : "")}</p></div>`;
    }).join("");
    const knobs = [...new Set(jobs.flatMap((d) => Object.keys((d.recommendation || {}).config || {})))];
    const table = document.getElementById("compare-table");
    table.tHead.innerHTML = `<tr><th>knob</th>${jobs.map((d) => `<th>${esc(label(d))}</th>`).join("")}</tr>`;
    table.tBodies[0].innerHTML = knobs.map((knob) => `<tr><td>${esc(knob)}</td>${jobs.map((d) =>
      `<td>${esc(((d.recommendation || {}).config || {})[knob])}</td>`).join("")}</tr>`).join("");
    const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    draw("plot-compare", jobs.map((data, i) => {
      const points = data.trials.filter((t) => measured(t) && (t.config || {}).batch_size != null);
      return { type: "scatter", mode: "markers", name: label(data), meta: "trials",
               x: points.map((t) => t.config.batch_size), y: points.map((t) => t.samples_per_s),
               text: points.map(hoverOf), hovertemplate: "%{text}<extra></extra>",
               marker: { color: colours[i % colours.length], size: 9, opacity: 0.8 } };
    }), { xaxis: { title: { text: "batch size" }, type: "log", dtick: Math.log10(2) },
          yaxis: { title: { text: "samples/s" }, rangemode: "tozero" } });
    ready();
  }

  // The next poll: one that fails keeps what is shown, says so in the bar and tries again; a
  // 401 (the server's token changed) asks for the token.
  function schedule(refresh) {
    return setTimeout(async () => {
      const note = document.getElementById("bar-note");
      try {
        await refresh();
        note.textContent = "";
      } catch (error) {
        if (error instanceof Unauthorized) {
          askForToken(start, error.refused);
          return;
        }
        note.textContent = `not updated (${error.message || error}); trying again`;
        schedule(refresh);
      }
    }, POLL_MS);
  }

  // The page is drawn: tests wait for the attribute, the load benchmark reads the mark.
  function ready() {
    if (body.dataset.ready) return;
    body.dataset.ready = "1";
    performance.mark("autotune-ready");
  }

  // -- start ---------------------------------------------------------------------------------

  // Forgets the tab's token only when it is the one refused: a token stored while a request
  // without one was on its way is kept, for the next try.
  function askForToken(retry, refused) {
    show("token-view");
    const form = document.getElementById("token-prompt");
    const input = document.getElementById("token-input");
    if (refused && sessionStorage.getItem(TOKEN_KEY) === refused) {
      const error = document.getElementById("token-error");
      error.hidden = false;
      error.textContent = "The server refused the token this tab had; paste the current one.";
      sessionStorage.removeItem(TOKEN_KEY);
    }
    // One handler however often the prompt is shown: a refused token asks again.
    form.onsubmit = (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      guard(retry);
    };
    input.focus();
  }

  function showError(error) {
    const box = document.createElement("p");
    box.className = "error";
    box.id = "page-error";
    box.textContent = error.message || String(error);
    app.replaceChildren(box);
  }

  async function guard(action) {
    try {
      await action();
    } catch (error) {
      if (error instanceof Unauthorized) askForToken(start, error.refused);
      else showError(error);
    }
  }

  const VIEWS = { jobs: jobsPage, job: jobPage, compare: comparePage };
  const start = () => VIEWS[body.dataset.view]();
  guard(start);
})();
