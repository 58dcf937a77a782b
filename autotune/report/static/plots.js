// The job page's plots, and the helpers for trials and numbers that the page shares with them:
// what goes on which axis, in which colour; plotly.js draws. Served and inlined as one script
// with page.js, before it (autotune/report/_assets.py), which reads them from `autotunePlots`.
"use strict";

const autotunePlots = (function () {
  const PLOT_CONFIG = { displaylogo: false, responsive: true };

  // -- numbers and trials -------------------------------------------------------------------------

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

  // -- the job page's plots -----------------------------------------------------------------------

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

  return {
    esc, fixed, rate, bytes, outcomeOf, measured, precisionOf, reasonOf, configLine, hoverOf,
    draw, renderHistory, renderKnobPlots, renderMemory, renderCapacity,
  };
})();
