// The autotune job page: jobs list, one job, two jobs compared.
// Served live by the REST service (data from the /v1 API, polled while jobs run) or inlined in
// a report file written by `autotune report` (data from the #autotune-data element, no network).
// The plots and the helpers they share with this file are in plots.js, which comes first.
"use strict";

(function () {
  const {
    esc, fixed, rate, bytes, outcomeOf, measured, precisionOf, reasonOf, configLine, hoverOf,
    draw, renderHistory, renderKnobPlots, renderMemory, renderCapacity,
  } = autotunePlots;
  const body = document.body;
  const app = document.getElementById("app");
  const inlineData = document.getElementById("autotune-data");
  const POLL_MS = Number(body.dataset.pollMs || 2000);
  const TOKEN_KEY = "autotune.token";
  const PAGE_SIZE = 100; // the API's largest page of trials
  const RUNNING = new Set(["queued", "running"]);

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

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
  const show = (template) => {
    app.replaceChildren(document.getElementById(template).content.cloneNode(true));
  };

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