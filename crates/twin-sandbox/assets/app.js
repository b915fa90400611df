// vllm-twin sandbox page. No framework, no network beyond this server.
// State for tests and curious users: window.sandbox.state.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";
  const GIB = 1024 ** 3;

  const state = {
    catalog: null,
    controls: null,
    gen: 0,            // bumps on every control change
    runsDone: 0,       // completed runs (done events)
    running: false,
    points: [],
    findings: [],      // findings at the latest point
    seen: {},          // id -> {t, title, severity}
    plan: null,
    refused: null,
    error: null,
    summary: null,
    pinned: null,      // {controls, points, label}
    presetId: "default",
    consoleErrors: 0,
  };
  window.sandbox = { state };

  // ---- control definitions ------------------------------------------------------------
  // kind: range (linear), log (log-scaled slider), select, check. `opt`: 0 means vLLM's default.
  const GROUPS = [
    { name: "Model and GPU", items: [
      { id: "model", label: "Model", kind: "select", options: () => state.catalog.models.map((m) => [m.name, m.name]) },
      { id: "gpu", label: "GPU", kind: "select", options: () => state.catalog.gpus.map((g) => [g.key, `${g.key} (${Math.round(g.memory_bytes / 1e9)} GB)`]) },
      { id: "tp", label: "Tensor parallel <code>-tp</code>", kind: "select", options: () => [1, 2, 4, 8].map((x) => [x, String(x)]), num: true },
      { id: "max_model_len", label: "<code>--max-model-len</code>", kind: "select", num: true,
        options: () => [[0, "model's own"], ...[2048, 4096, 8192, 16384, 32768, 65536, 131072].map((x) => [x, String(x)])] },
    ]},
    { name: "Traffic", items: [
      { id: "traffic", label: "Load", kind: "select", options: () => [["rate", "arrival rate (open loop)"], ["concurrency", "concurrency (closed loop)"]] },
      { id: "rate", label: "Arrival rate", kind: "log", min: 0.1, max: 200, unit: " req/s", digits: 1, when: (c) => c.traffic === "rate" },
      { id: "concurrency", label: "Concurrent clients", kind: "log", min: 1, max: 4096, int: true, when: (c) => c.traffic === "concurrency" },
      { id: "prompt_mean", label: "Prompt length, mean", kind: "log", min: 16, max: 65536, int: true, unit: " tok" },
      { id: "prompt_spread", label: "Prompt spread (lognormal σ)", kind: "range", min: 0, max: 2, step: 0.1, digits: 1 },
      { id: "output_mean", label: "Output length, mean", kind: "log", min: 1, max: 16384, int: true, unit: " tok" },
      { id: "output_spread", label: "Output spread (lognormal σ)", kind: "range", min: 0, max: 2, step: 0.1, digits: 1 },
      { id: "prefix_share", label: "Shared-prefix share", kind: "range", min: 0, max: 1, step: 0.05, pct: true },
      { id: "prefix_len", label: "Shared prefix length", kind: "log", min: 16, max: 16384, int: true, unit: " tok", when: (c) => c.prefix_share > 0 },
      { id: "prefix_groups", label: "Distinct shared prefixes", kind: "range", min: 1, max: 32, step: 1, int: true, when: (c) => c.prefix_share > 0 },
      { id: "turns", label: "Multi-turn: turns per session", kind: "range", min: 0, max: 10, step: 1, int: true, zero: "single requests" },
      { id: "think_time_s", label: "Think time between turns", kind: "range", min: 0, max: 60, step: 1, unit: " s", when: (c) => c.turns > 1 },
      { id: "duration_s", label: "Virtual time to simulate", kind: "range", min: 30, max: 900, step: 30, unit: " s" },
    ]},
    { name: "Engine flags", items: [
      { id: "max_num_batched_tokens", label: "<code>--max-num-batched-tokens</code>", kind: "select", num: true,
        options: () => [[0, "default"], ...[256, 512, 1024, 2048, 4096, 8192, 16384, 32768].map((x) => [x, String(x)])], resolved: "max_num_batched_tokens" },
      { id: "max_num_seqs", label: "<code>--max-num-seqs</code>", kind: "range", min: 0, max: 1024, step: 8, int: true, zero: "default", resolved: "max_num_seqs" },
      { id: "max_num_active_seqs", label: "<code>--max-num-active-seqs</code>", kind: "range", min: 0, max: 1024, step: 8, int: true, zero: "unset" },
      { id: "long_prefill_token_threshold", label: "<code>--long-prefill-token-threshold</code>", kind: "select", num: true,
        options: () => [[0, "off"], ...[128, 256, 512, 1024, 2048, 4096, 8192].map((x) => [x, String(x)])] },
      { id: "long_prefill_adaptive", label: "<code>--long-prefill-token-threshold-adaptive</code>", kind: "check" },
      { id: "kv_cache_dtype", label: "<code>--kv-cache-dtype</code>", kind: "select", options: () => state.catalog.kv_cache_dtypes.map((x) => [x, x]) },
      { id: "gpu_memory_utilization", label: "<code>--gpu-memory-utilization</code>", kind: "range", min: 0, max: 1, step: 0.01, digits: 2, zero: "default", resolved: "gpu_memory_utilization" },
      { id: "block_size", label: "<code>--block-size</code>", kind: "select", num: true,
        options: () => state.catalog.block_sizes.map((x) => [x, x === 0 ? "default" : String(x)]) },
      { id: "prefix_caching", label: "Prefix caching <code>--enable-prefix-caching</code>", kind: "check" },
      { id: "chunked_prefill", label: "Chunked prefill <code>--enable-chunked-prefill</code>", kind: "check" },
      { id: "enforce_eager", label: "<code>--enforce-eager</code> (no CUDA graphs)", kind: "check" },
    ]},
    { name: "Fleet", items: [
      { id: "replicas", label: "Replicas <code>--replicas</code>", kind: "range", min: 1, max: 16, step: 1, int: true },
      { id: "router", label: "Router <code>--router</code>", kind: "select",
        options: () => [["round-robin", "round-robin (k8s Service)"], ["least-loaded", "least-loaded"], ["session-affinity", "session-affinity"], ["prefix-aware", "prefix-aware (llm-d)"], ["random", "random"]] },
      { id: "autoscale", label: "Autoscaler (HPA, 1–8 replicas)", kind: "select",
        options: () => [["off", "off"], ["waiting", "num_requests_waiting > 3"], ["kv", "kv_cache_usage_perc > 0.65"]] },
    ]},
  ];
  const DEFS = {};
  GROUPS.forEach((g) => g.items.forEach((d) => { DEFS[d.id] = d; }));

  // Log sliders: position 0..1000 ↔ value.
  const LOG_STEPS = 1000;
  const logToValue = (d, pos) => {
    const v = Math.exp(Math.log(d.min) + (Math.log(d.max) - Math.log(d.min)) * (pos / LOG_STEPS));
    return d.int ? Math.round(v) : Math.round(v * 10) / 10;
  };
  const valueToLog = (d, v) => Math.round(LOG_STEPS * (Math.log(Math.max(d.min, Math.min(d.max, v))) - Math.log(d.min)) / (Math.log(d.max) - Math.log(d.min)));

  function fmtValue(d, v) {
    if (d.kind === "check") return v ? "on" : "off";
    if (d.zero && v === 0) {
      if (d.resolved && state.plan) return `${d.zero} (${state.plan[d.resolved]})`;
      return d.zero;
    }
    if (d.pct) return `${Math.round(v * 100)}%`;
    const n = d.digits !== undefined ? Number(v).toFixed(d.digits) : String(v);
    return n + (d.unit || "");
  }

  function buildControls() {
    const root = $("control-groups");
    root.textContent = "";
    for (const g of GROUPS) {
      const fs = document.createElement("fieldset");
      const lg = document.createElement("legend");
      lg.textContent = g.name;
      fs.appendChild(lg);
      for (const d of g.items) {
        const row = document.createElement("div");
        row.className = "ctl" + (d.kind === "check" ? " check" : "");
        row.id = "row-" + d.id;
        const label = document.createElement("label");
        label.htmlFor = "c-" + d.id;
        label.innerHTML = d.label;
        let input;
        if (d.kind === "select") {
          input = document.createElement("select");
          for (const [v, text] of d.options()) {
            const o = document.createElement("option");
            o.value = String(v);
            o.textContent = text;
            input.appendChild(o);
          }
        } else {
          input = document.createElement("input");
          if (d.kind === "check") {
            input.type = "checkbox";
          } else {
            input.type = "range";
            if (d.kind === "log") {
              input.min = "0"; input.max = String(LOG_STEPS); input.step = "1";
            } else {
              input.min = String(d.min); input.max = String(d.max); input.step = String(d.step);
            }
          }
        }
        input.id = "c-" + d.id;
        input.name = d.id;
        input.dataset.control = d.id;
        if (d.kind === "check") {
          row.appendChild(input);
          row.appendChild(label);
        } else {
          row.appendChild(label);
          if (d.kind !== "select") {
            const out = document.createElement("output");
            out.id = "o-" + d.id;
            out.htmlFor = input.id;
            row.appendChild(out);
            input.setAttribute("aria-describedby", out.id);
          }
          row.appendChild(input);
        }
        input.addEventListener(d.kind === "select" || d.kind === "check" ? "change" : "input", () => {
          state.controls[d.id] = readInput(d, input);
          state.presetId = "";
          $("preset").value = "";
          $("preset-desc").textContent = "Custom settings.";
          syncOutputs();
          scheduleRefresh();
        });
        fs.appendChild(row);
      }
      root.appendChild(fs);
    }
  }

  function readInput(d, input) {
    if (d.kind === "check") return input.checked;
    if (d.kind === "select") return d.num ? Number(input.value) : input.value;
    if (d.kind === "log") return logToValue(d, Number(input.value));
    return Number(input.value);
  }

  function writeInputs() {
    for (const id in DEFS) {
      const d = DEFS[id];
      const input = $("c-" + id);
      const v = state.controls[id];
      if (d.kind === "check") input.checked = !!v;
      else if (d.kind === "log") input.value = String(valueToLog(d, v));
      else if (d.kind === "select") {
        if (![...input.options].some((o) => o.value === String(v))) {
          const o = document.createElement("option");
          o.value = String(v); o.textContent = String(v);
          input.appendChild(o);
        }
        input.value = String(v);
      } else input.value = String(v);
    }
    syncOutputs();
  }

  function syncOutputs() {
    for (const id in DEFS) {
      const d = DEFS[id];
      const out = $("o-" + id);
      if (out) out.textContent = fmtValue(d, state.controls[id]);
      const row = $("row-" + id);
      const on = !d.when || d.when(state.controls);
      row.classList.toggle("off", !on);
      $("c-" + id).disabled = !on;
      row.removeAttribute("aria-invalid");
    }
  }

  // ---- refresh: plan, then the live stream -----------------------------------------------
  let refreshTimer = null;
  let source = null;
  const clientId = Math.random().toString(36).slice(2);
  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 40);
  }

  function closeStream() {
    if (source) { source.close(); source = null; }
    state.running = false;
  }

  async function refresh() {
    const gen = ++state.gen;
    closeStream();
    updatePinLabel();
    const body = JSON.stringify(state.controls);
    let res, data;
    try {
      res = await fetch("/api/plan", { method: "POST", body, headers: { "content-type": "application/json" } });
      data = await res.json();
    } catch (e) {
      if (gen === state.gen) showError({ field: "server", message: "the sandbox server is not answering: " + e });
      return;
    }
    if (gen !== state.gen) return;
    if (!res.ok) {
      showError(data.error || { field: "server", message: res.statusText });
      setStatus("fix the highlighted control");
      return;
    }
    showError(null);
    $("serve-cmd").textContent = data.serve_command;
    $("sim-cmd").textContent = data.simulate_command;
    $("notes").textContent = (data.notes || []).join(" · ");
    state.points = []; state.findings = []; state.seen = {}; state.summary = null;
    if (!data.ok) {
      state.plan = null; state.refused = data.refused;
      renderRefusal(data.refused);
      renderBanners([{ id: "startup_refused", severity: "critical", title: "vLLM refuses to start with these flags", detail: "See the start-up memory plan below.", advice: [] }]);
      renderSeen(); renderCharts(); renderSummary();
      setStatus("vLLM would not start");
      return;
    }
    state.plan = data.plan; state.refused = null;
    syncOutputs();
    renderPlan(data.plan);
    renderBanners([]); renderSeen(); renderCharts(); renderSummary();
    const speed = $("speed").value;
    const url = `/api/stream?client=${clientId}&speed=${speed}&controls=${encodeURIComponent(body)}`;
    const es = new EventSource(url);
    source = es;
    state.running = true;
    setStatus("simulating…");
    es.addEventListener("point", (ev) => {
      if (gen !== state.gen) return;
      const m = JSON.parse(ev.data);
      state.points.push(m.p);
      state.findings = m.f;
      for (const f of m.f) if (!state.seen[f.id]) state.seen[f.id] = { t: m.p.t, title: f.title, severity: f.severity };
      scheduleDraw();
    });
    es.addEventListener("done", (ev) => {
      es.close();
      if (gen !== state.gen) return;
      source = null;
      state.running = false;
      state.summary = JSON.parse(ev.data);
      state.runsDone++;
      scheduleDraw();
      const s = state.summary;
      setStatus(s.error ? "error: " + s.error : `done: ${Math.round(s.sim_s)} virtual s simulated in ${s.wall_ms.toFixed(0)} ms`);
    });
    es.addEventListener("error", () => {
      if (gen !== state.gen || es.readyState === EventSource.CONNECTING) { es.close(); }
      if (gen === state.gen && state.running) { state.running = false; setStatus("stream closed"); }
    });
  }

  function setStatus(s) { $("status").textContent = s; }

  function showError(err) {
    const box = $("error");
    state.error = err;
    for (const id in DEFS) $("row-" + id).removeAttribute("aria-invalid");
    if (!err) { box.hidden = true; box.textContent = ""; return; }
    box.hidden = false;
    box.textContent = `${err.field}: ${err.message}`;
    const row = $("row-" + err.field);
    if (row) row.setAttribute("aria-invalid", "true");
  }

  // ---- drawing ----------------------------------------------------------------------------
  let drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      renderCharts(); renderBanners(state.findings); renderSeen(); renderSummary();
    });
  }

  function el(tag, attrs, parent) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function renderBanners(findings) {
    const root = $("banners");
    root.textContent = "";
    const list = findings.length ? findings : (state.points.length ? [{ id: "healthy", source: "", severity: "ok", title: "No alert: KV below 0.85, no preemptions, and the doctor names no playbook branch.", detail: "", evidence: [], advice: [] }] : []);
    for (const f of list) {
      const b = document.createElement("div");
      b.className = "banner " + f.severity;
      b.dataset.finding = f.id;
      if (f.severity === "critical") b.setAttribute("role", "alert");
      const t = document.createElement("b");
      t.textContent = (f.severity === "ok" ? "" : f.severity.toUpperCase() + " · ") + f.title;
      b.appendChild(t);
      // Which voice speaks: the seed's alert line, or the doctor (and its playbook scenario).
      if (f.source) {
        const tag = document.createElement("span");
        tag.className = "source";
        tag.textContent = f.source === "doctor"
          ? "doctor" + (f.scenario ? (f.scenario === "extra" ? " · beyond the playbook" : " · playbook " + f.scenario) : "") + " · " + f.id
          : "alert · seed threshold";
        b.appendChild(tag);
      }
      if (f.detail) { const p = document.createElement("p"); p.textContent = f.detail; b.appendChild(p); }
      if (f.evidence && f.evidence.length) {
        const p = document.createElement("p");
        p.className = "evidence";
        p.textContent = f.evidence.join(" · ");
        b.appendChild(p);
      }
      if (f.advice && f.advice.length) {
        const p = document.createElement("p");
        p.className = "advice";
        p.textContent = "try: " + f.advice.join("  |  ");
        b.appendChild(p);
      }
      root.appendChild(b);
    }
  }

  function renderSeen() {
    const ul = $("seen");
    ul.textContent = "";
    const ids = Object.keys(state.seen);
    $("seen-box").querySelector("summary").textContent = `Seen during this run (${ids.length})`;
    for (const id of ids) {
      const s = state.seen[id];
      const li = document.createElement("li");
      li.dataset.finding = id;
      li.textContent = `t=${s.t}s ${s.severity}: ${s.title}`;
      ul.appendChild(li);
    }
  }

  const gib = (b) => (b / GIB).toFixed(2) + " GiB";

  function renderPlan(p) {
    const root = $("plan");
    root.textContent = "";
    const segs = [
      ["weights", "Weights", p.weights_bytes],
      ["act", "Activation peak", p.activation_bytes],
      ["graph", "CUDA graphs", p.cudagraph_bytes],
      ["nontorch", "Non-torch", p.non_torch_bytes],
      ["margin", "Margin", p.margin_bytes],
      ["kv", "KV cache pool", p.kv_bytes],
    ];
    const used = segs.reduce((a, s) => a + s[2], 0);
    segs.push(["free", "Not reserved (1 − utilization)", Math.max(0, p.device_total_bytes - used)]);
    const total = segs.reduce((a, s) => a + s[2], 0) || 1;
    const bar = document.createElement("div");
    bar.className = "membar";
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", segs.filter((s) => s[2] > 0).map((s) => `${s[1]} ${gib(s[2])}`).join(", "));
    const legend = document.createElement("ul");
    legend.className = "legend";
    for (const [k, name, bytes] of segs) {
      if (bytes <= 0) continue;
      const d = document.createElement("div");
      d.className = "seg-" + k;
      d.dataset.segment = k;
      d.style.width = (100 * bytes / total) + "%";
      d.title = `${name}: ${gib(bytes)}`;
      bar.appendChild(d);
      const li = document.createElement("li");
      li.className = "sw-" + k;
      li.textContent = `${name} ${gib(bytes)}`;
      legend.appendChild(li);
    }
    root.appendChild(bar);
    root.appendChild(legend);
    const facts = document.createElement("div");
    facts.className = "facts";
    const fact = (label, value, id) => {
      const f = document.createElement("div");
      f.className = "fact";
      const b = document.createElement("b");
      b.textContent = value;
      if (id) b.id = id;
      f.appendChild(b);
      f.appendChild(document.createTextNode(label));
      facts.appendChild(f);
    };
    fact("KV blocks (num_gpu_blocks)", p.num_gpu_blocks.toLocaleString("en-US"), "plan-blocks");
    fact(`tokens per block`, String(p.block_size));
    fact("GPU KV cache size, tokens", p.kv_cache_tokens.toLocaleString("en-US"));
    fact(`max concurrency at ${p.max_model_len.toLocaleString("en-US")} tokens`, p.max_concurrency.toFixed(2) + "×", "plan-concurrency");
    fact(`requests of ${p.mean_request_tokens} tokens (the workload's mean) that fit`, Math.floor(p.concurrency_at_mean).toLocaleString("en-US"));
    fact("max_num_batched_tokens / max_num_seqs", `${p.max_num_batched_tokens} / ${p.max_num_seqs}`);
    root.appendChild(facts);
    const det = document.createElement("details");
    const sm = document.createElement("summary");
    sm.textContent = "vLLM start-up log for this plan";
    det.appendChild(sm);
    const pre = document.createElement("pre");
    pre.className = "log";
    pre.textContent = p.log;
    det.appendChild(pre);
    root.appendChild(det);
  }

  function renderRefusal(r) {
    const root = $("plan");
    root.textContent = "";
    const box = document.createElement("div");
    box.className = "refused";
    box.id = "refusal";
    const b = document.createElement("b");
    b.textContent = "vLLM refuses to start (ValueError at start-up):";
    box.appendChild(b);
    const pre = document.createElement("pre");
    pre.textContent = r.message;
    box.appendChild(pre);
    if (r.estimated_max_model_len) {
      const p = document.createElement("p");
      p.textContent = `Largest --max-model-len that fits: ${r.estimated_max_model_len}.`;
      box.appendChild(p);
    }
    root.appendChild(box);
  }

  // Charts: [title, series, options].
  const C = { a: "#1f6feb", b: "#cf222e", c: "#8250df", d: "#1a7f37", e: "#bc4c00" };
  const CHARTS = [
    { id: "kv", title: "vllm:kv_cache_usage_perc", series: [["kv", "usage", C.a], ["kv_max", "max in 1 s", C.e]], fixedMax: 1, fmt: (v) => (v * 100).toFixed(0) + "%",
      lines: () => [[0.85, "0.85 warn", "#d4a72c"], [0.98, "0.98 crit", "#cf222e"]] },
    { id: "queue", title: "num_requests_running vs waiting", series: [["running", "running", C.a], ["waiting", "waiting", C.b]], fmt: (v) => v.toFixed(0),
      lines: () => {
        const out = [];
        if (state.plan) out.push([state.plan.max_num_seqs, "max-num-seqs", "#8c959f"]);
        if (state.controls.max_num_active_seqs > 0) out.push([state.controls.max_num_active_seqs, "max-num-active-seqs", "#bf3989"]);
        return out;
      } },
    { id: "preempt", title: "rate(vllm:num_preemptions_total) /s", series: [["preempt", "preemptions/s", C.b]], fmt: (v) => v.toFixed(1) },
    { id: "ttft", title: "TTFT (10 s window)", series: [["ttft_p50", "P50", C.d], ["ttft_p95", "P95", C.a], ["ttft_p99", "P99", C.b]], log: true, fmt: fmtS },
    { id: "itl", title: "ITL (10 s window)", series: [["itl_p50", "P50", C.d], ["itl_p99", "P99", C.b]], log: true, fmt: fmtS },
    { id: "tput", title: "Tokens/s: prompt in, generated out", series: [["tok_in", "in", C.c], ["tok_out", "out", C.d]], fmt: fmtK },
    { id: "tokstep", title: "Tokens per engine step", series: [["tok_step", "scheduled tokens", C.c]], fmt: fmtK,
      lines: () => state.plan ? [[state.plan.max_num_batched_tokens, "max-num-batched-tokens", "#8c959f"]] : [] },
    { id: "replicas", title: "Replicas in service", series: [["replicas", "replicas", C.c]], minMax: 4, fmt: (v) => v.toFixed(0),
      lines: () => state.controls.autoscale !== "off" ? [[8, "HPA maxReplicas", "#8c959f"]] : [] },
  ];
  function fmtS(v) { return v >= 1 ? v.toFixed(v >= 10 ? 0 : 1) + " s" : (v * 1000).toFixed(v >= 0.01 ? 0 : 1) + " ms"; }
  function fmtK(v) { return v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k" : v.toFixed(0); }

  function buildCharts() {
    const root = $("charts");
    root.textContent = "";
    for (const c of CHARTS) {
      const fig = document.createElement("figure");
      fig.className = "chart";
      fig.id = "chart-" + c.id;
      const h = document.createElement("h3");
      h.textContent = c.title;
      const now = document.createElement("span");
      now.className = "sub now";
      now.id = "now-" + c.id;
      h.appendChild(document.createTextNode(" "));
      h.appendChild(now);
      fig.appendChild(h);
      const keys = document.createElement("div");
      keys.className = "keys";
      keys.id = "keys-" + c.id;
      fig.appendChild(keys);
      const svg = el("svg", { viewBox: "0 0 560 190", role: "img", "aria-label": c.title });
      svg.id = "svg-" + c.id;
      fig.appendChild(svg);
      root.appendChild(fig);
    }
  }

  const W = 560, H = 190, PL = 46, PR = 8, PT = 8, PB = 22;

  function renderCharts() {
    const dur = state.controls ? state.controls.duration_s : 300;
    const pinned = state.pinned;
    const xmax = Math.max(dur, pinned ? pinned.controls.duration_s : 0);
    $("ab-legend").textContent = pinned ? `— solid: B (current) · dashed: A (pinned: ${pinned.label})` : "";
    for (const c of CHARTS) {
      const svg = $("svg-" + c.id);
      svg.textContent = "";
      const runs = [{ pts: state.points, dash: null }];
      if (pinned) runs.push({ pts: pinned.points, dash: "5 4" });
      let ymax = 0, ymin = Infinity;
      for (const r of runs) for (const p of r.pts) for (const [k] of c.series) {
        const v = p[k];
        if (v == null) continue;
        ymax = Math.max(ymax, v);
        if (v > 0) ymin = Math.min(ymin, v);
      }
      const lines = c.lines ? c.lines() : [];
      for (const [y] of lines) if (!c.log) ymax = Math.max(ymax, y * 1.05);
      let y0 = 0, y1 = ymax > 0 ? niceCeil(ymax) : 1;
      if (c.fixedMax) y1 = c.fixedMax;
      if (c.minMax) y1 = Math.max(y1, c.minMax);
      if (c.log) {
        y0 = ymin === Infinity ? 0.001 : Math.pow(10, Math.floor(Math.log10(ymin)));
        y1 = ymax > 0 ? Math.pow(10, Math.ceil(Math.log10(ymax * 1.001))) : 1;
        if (y1 <= y0) y1 = y0 * 10;
      }
      const X = (t) => PL + (W - PL - PR) * (t / (xmax || 1));
      const Y = (v) => {
        if (c.log) {
          const lv = Math.log10(Math.max(v, y0));
          return PT + (H - PT - PB) * (1 - (lv - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0)));
        }
        return PT + (H - PT - PB) * (1 - (v - y0) / (y1 - y0));
      };
      // grid + axes
      const ticks = c.log ? logTicks(y0, y1) : [0, 0.25, 0.5, 0.75, 1].map((f) => y0 + f * (y1 - y0));
      for (const tv of ticks) {
        const y = Y(tv);
        el("line", { x1: PL, x2: W - PR, y1: y, y2: y, class: "grid" }, svg);
        const t = el("text", { x: PL - 4, y: y + 4, "text-anchor": "end", class: "axis" }, svg);
        t.textContent = c.fmt(tv);
      }
      for (let i = 0; i <= 5; i++) {
        const tv = (xmax * i) / 5;
        const t = el("text", { x: X(tv), y: H - 6, "text-anchor": i === 0 ? "start" : i === 5 ? "end" : "middle", class: "axis" }, svg);
        t.textContent = Math.round(tv) + (i === 5 ? " s" : "");
      }
      for (const [y, label, color] of lines) {
        if (y > y1 || y < y0) continue;
        el("line", { x1: PL, x2: W - PR, y1: Y(y), y2: Y(y), stroke: color, "stroke-dasharray": "2 3", "stroke-width": 1.5 }, svg);
        const t = el("text", { x: W - PR - 2, y: Y(y) - 3, "text-anchor": "end", class: "axis", fill: color }, svg);
        t.textContent = label;
      }
      for (const r of runs) {
        for (const [k, , color] of c.series) {
          let d = "", pen = false;
          for (const p of r.pts) {
            const v = p[k];
            if (v == null || (c.log && v <= 0)) { pen = false; continue; }
            d += (pen ? "L" : "M") + X(p.t).toFixed(1) + " " + Y(v).toFixed(1);
            pen = true;
          }
          if (!d) continue;
          const attrs = { d, fill: "none", stroke: color, "stroke-width": r.dash ? 1.5 : 2, "data-series": k };
          if (r.dash) { attrs["stroke-dasharray"] = r.dash; attrs.opacity = "0.75"; attrs["data-run"] = "A"; } else attrs["data-run"] = "B";
          el("path", attrs, svg);
        }
      }
      svg.dataset.points = String(state.points.length);
      // keys + current value
      const keys = $("keys-" + c.id);
      keys.textContent = "";
      for (const r of runs) for (const [, label, color] of c.series) {
        const s = document.createElement("span");
        if (r.dash) s.className = "dash";
        s.style.setProperty("--k", color);
        s.textContent = r.dash ? `A ${label}` : label;
        keys.appendChild(s);
      }
      const last = state.points[state.points.length - 1];
      $("now-" + c.id).textContent = last ? "now " + c.series.map(([k, label]) => `${label} ${last[k] == null ? "–" : c.fmt(last[k])}`).join(", ") : "";
    }
  }
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }
  function logTicks(y0, y1) {
    const out = [];
    for (let v = y0; v <= y1 * 1.0001; v *= 10) out.push(v);
    return out;
  }

  function renderSummary() {
    const root = $("summary");
    root.textContent = "";
    const s = state.summary;
    if (!s) { root.textContent = state.running ? "running…" : ""; return; }
    const t = s.totals;
    const rows = [
      ["ended by", s.stop + (s.error ? ": " + s.error : "")],
      ["wall time of the run", s.wall_ms.toFixed(0) + " ms for " + Math.round(s.sim_s) + " virtual s"],
      ["finished requests", t.finished], ["rejected (prompt ≥ max-model-len)", t.rejected],
      ["engine steps", t.steps], ["preemptions (finished requests)", t.preemptions],
      ["TTFT P50 / P99", `${t.ttft_p50 == null ? "–" : fmtS(t.ttft_p50)} / ${t.ttft_p99 == null ? "–" : fmtS(t.ttft_p99)}`],
      ["ITL P50 / P99", `${t.itl_p50 == null ? "–" : fmtS(t.itl_p50)} / ${t.itl_p99 == null ? "–" : fmtS(t.itl_p99)}`],
      ["KV usage peak", (t.kv_peak * 100).toFixed(0) + "%"],
      ["running / waiting peak", `${t.running_peak} / ${t.waiting_peak}`],
    ];
    const table = document.createElement("table");
    table.className = "summary-table";
    table.id = "summary-table";
    for (const [k, v] of rows) {
      const tr = document.createElement("tr");
      const th = document.createElement("th"); th.scope = "row"; th.textContent = k;
      const td = document.createElement("td"); td.textContent = String(v);
      tr.appendChild(th); tr.appendChild(td); table.appendChild(tr);
    }
    root.appendChild(table);
  }

  // ---- presets, pin, copy ---------------------------------------------------------------
  function applyPreset(id) {
    const p = state.catalog.presets.find((x) => x.id === id);
    if (!p) return false;
    state.presetId = id;
    state.controls = Object.assign({}, p.controls);
    $("preset").value = id;
    $("preset-desc").textContent = p.description;
    writeInputs();
    scheduleRefresh();
    return true;
  }

  function diffLabel(a, b) {
    const fa = a, fb = b, out = [];
    for (const k in fb) if (JSON.stringify(fa[k]) !== JSON.stringify(fb[k])) out.push(`${k} ${fmtValue(DEFS[k] || {}, fa[k])}`);
    return out.length ? out.slice(0, 4).join(", ") + (out.length > 4 ? "…" : "") : "same settings";
  }

  function pin() {
    if (!state.points.length) return;
    state.pinned = { controls: Object.assign({}, state.controls), points: state.points.slice(), label: "" };
    state.pinned.label = "as pinned";
    $("unpin").disabled = false;
    updatePinLabel();
    renderCharts();
  }
  function updatePinLabel() {
    if (state.pinned) state.pinned.label = diffLabel(state.pinned.controls, state.controls);
  }

  async function copyFrom(preId, btn) {
    const text = $(preId).textContent;
    try {
      await navigator.clipboard.writeText(text);
      btn.textContent = "Copied";
    } catch (_) {
      const r = document.createRange();
      r.selectNodeContents($(preId));
      const sel = window.getSelection();
      sel.removeAllRanges(); sel.addRange(r);
      btn.textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => { btn.textContent = "Copy"; }, 1500);
  }

  async function init() {
    window.addEventListener("error", () => { state.consoleErrors++; });
    const res = await fetch("/api/catalog");
    state.catalog = await res.json();
    const sel = $("preset");
    const custom = document.createElement("option");
    custom.value = ""; custom.textContent = "custom";
    sel.appendChild(custom);
    for (const p of state.catalog.presets) {
      const o = document.createElement("option");
      o.value = p.id; o.textContent = p.name;
      sel.appendChild(o);
    }
    sel.addEventListener("change", () => { if (sel.value) applyPreset(sel.value); });
    $("speed").addEventListener("change", scheduleRefresh);
    $("pin").addEventListener("click", pin);
    $("unpin").addEventListener("click", () => { state.pinned = null; $("unpin").disabled = true; renderCharts(); });
    $("copy-serve").addEventListener("click", (e) => copyFrom("serve-cmd", e.currentTarget));
    $("copy-sim").addEventListener("click", (e) => copyFrom("sim-cmd", e.currentTarget));
    $("controls").addEventListener("submit", (e) => e.preventDefault());
    buildControls();
    buildCharts();
    window.sandbox.applyPreset = applyPreset;
    window.sandbox.pin = pin;
    window.sandbox.set = (id, v) => { state.controls[id] = v; writeInputs(); scheduleRefresh(); };
    applyPreset("default");
  }

  document.addEventListener("DOMContentLoaded", () => { init().catch((e) => { setStatus("failed to start: " + e); }); });
})();
